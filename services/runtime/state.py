"""The thread state's old place, kept only for `services.agents` and
`services.runtime.model_step`, which name it until the extension API change moves them
off it; everything else imports `domain.thread_state`."""

from domain.thread_state import ThreadState as ThreadState
