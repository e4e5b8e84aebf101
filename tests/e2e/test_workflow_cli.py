"""The workflow commands as a person runs them, against a running system: the worked
example of docs/workflows.md runs offline with the fake model."""

from __future__ import annotations

import os
from pathlib import Path

from agency.infra.endpoints import Endpoints, write_endpoints
from tests.cli.test_commands import agency
from tests.e2e.conftest import Client
from tests.helpers import assert_eventually

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "review.yaml"


def _endpoints(client: Client, tmp_path: Path, nats_url: str = "unused") -> str:
    key = client.http.headers["Authorization"].removeprefix("Bearer ")
    write_endpoints(
        tmp_path,
        Endpoints(
            pid=os.getpid(), nats_url=nats_url, database_url="unused",
            api_url=str(client.http.base_url).rstrip("/"), api_key=key, tenant_id=client.tenant,
        ),
    )  # fmt: skip
    return str(tmp_path)


async def test_the_worked_example_runs_offline_and_the_channel_can_be_read(
    client: Client, tmp_path: Path, nats_url: str
) -> None:
    data = _endpoints(client, tmp_path, nats_url)
    os.environ["REVIEW_AUDIENCE"] = "busy"
    try:
        status, out, err = await agency(
            "workflow", "run", str(EXAMPLE), "--tag", "docs",
            "--input", "topic=event sourcing", "--data-dir", data,
        )  # fmt: skip
    finally:
        del os.environ["REVIEW_AUDIENCE"]
    assert status == 0, out + err
    lines = out.splitlines()
    assert lines[0] == "@review:docs: @writer, @reviewer, @approver"
    senders = [line.split("]")[0] + "]" for line in lines if line.startswith("[@")]
    assert senders == ["[@user]", "[@writer]", "[@reviewer]", "[@approver]"], out
    assert (
        "[@user] @writer Please draft a note about event sourcing for workflow review:docs." in out
    )
    assert "[@writer] My part is done. @reviewer, over to you." in out
    assert "[@reviewer] My part is done. @approver, over to you." in out
    assert lines[-1] == "— settled"
    # The reviewer's prompt came from prompts/reviewer.md, its variable from this environment.
    agency_id = await _default_agency(client)
    r = await client.http.get(f"/agency/{agency_id}/workflows/review:docs")
    reviewer = next(m["agentType"] for m in r.json()["members"] if m["name"] == "reviewer")
    r = await client.http.get(f"/agency/{agency_id}/blueprints")
    prompt = next(b["prompt"] for b in r.json() if b["name"] == reviewer)
    assert prompt.endswith(
        "You review the draft in draft.md for busy readers.\n"
        "When it reads well, hand over to @approver; otherwise ask @writer to fix it.\n"
    ), prompt

    status, out, err = await agency("peek", "@review:docs", "--data-dir", data)
    assert status == 0, err
    assert [line.split("]")[0] for line in out.splitlines()] == [
        "[@user",
        "[@writer",
        "[@reviewer",
        "[@approver",
    ]
    status, out, err = await agency(
        "send", "@review:docs", "@approver", "Approve once more, please.", "--data-dir", data
    )
    assert status == 0, err
    assert out.startswith("sent msg_") and out.strip().endswith("to @review:docs")
    status, out, err = await agency("workflow", "ls", "--data-dir", data)
    assert status == 0, err
    assert out.startswith("@review:docs") and "@writer(" in out
    status, out, err = await agency("schedules", "ls", "--data-dir", data)
    assert status == 0, err
    assert "0 9 * * 1-5" in out and "active" in out
    status, out, err = await agency("workflow", "replay", "@review:docs", "--data-dir", data)
    assert status == 0, err
    assert out.startswith("# workflow @review:docs wf_")
    assert "[@reviewer] My part is done. @approver, over to you." in out
    status, out, err = await agency("workflow", "stop", "@review:docs", "--data-dir", data)
    assert status == 0, err

    async def stopped() -> None:
        r = await client.http.get(f"/agency/{await _default_agency(client)}/workflows/review:docs")
        assert r.json()["status"] == "stopped", r.text

    await assert_eventually(stopped, timeout=15)


async def _default_agency(client: Client) -> str:
    agencies = (await client.http.get("/agencies")).json()
    return str(next(a["id"] for a in agencies if a["name"] == "default"))


async def test_errors_are_one_line(client: Client, tmp_path: Path) -> None:
    data = _endpoints(client, tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  a: {system_prompt: '${{ env.NOT_SET_ANYWHERE }}'}\n")
    status, _, err = await agency("workflow", "run", str(bad), "--data-dir", data)
    assert status == 2
    assert err.strip().startswith("agency: POST /agency/") and "NOT_SET_ANYWHERE" in err
    missing = tmp_path / "missing.yaml"
    missing.write_text("agents:\n  a: {system_prompt_file: prompts/none.md}\n")
    status, _, err = await agency("workflow", "run", str(missing), "--data-dir", data)
    assert status == 2
    assert err.startswith(f"agency: {missing}: system_prompt_file 'prompts/none.md': cannot read ")
    assert str(tmp_path / "prompts" / "none.md") in err
    status, _, err = await agency("peek", "@nosuch:tag", "--data-dir", data)
    assert status == 2 and "not found" in err
