"""The caches' old place, kept only for `services.agents.testing`, which names it until the
extension API change moves it off the runtime; everything else imports
`services.common.caches`."""

from services.common.caches import BlueprintCache as BlueprintCache
from services.common.caches import ThreadCache as ThreadCache
