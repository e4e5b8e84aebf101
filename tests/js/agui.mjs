// The AG-UI client (@ag-ui/client's HttpAgent) as an application runs it, against
// Agency's /agui/{agencyId}/{blueprint} route.
//
//   node agui.mjs '{"url": "...", "key": "...", "threadId": "...", "turns": [...]}'
//
// `messages`, if given, are the agent's messages to start with (what an application kept
// of the thread, as `initialMessages`).
// Each turn is one run of the same agent (so of one thread): `user` adds a user message,
// `answer` answers every tool call the last run left pending with that content (a
// frontend tool's result), `resume` answers the open interrupts (`"approve"`, `"reject"`,
// or the resume entries themselves), `tools` are the run's frontend tools,
// `forwardedProps` the run's forwarded properties. Prints one JSON
// line: per turn, the events the client applied, its outcome, or the error it raised; and
// the agent's messages and state at the end. A turn that takes longer than 60 s fails.
import { HttpAgent } from "@ag-ui/client";

const plan = JSON.parse(process.argv[2]);
const agent = new HttpAgent({
  url: plan.url,
  headers: plan.key ? { Authorization: `Bearer ${plan.key}` } : {},
  threadId: plan.threadId,
  initialMessages: plan.messages ?? [],
});

function resumeOf(turn, interrupts) {
  if (Array.isArray(turn.resume)) return turn.resume;
  return interrupts.map((i) =>
    turn.resume === "approve"
      ? { interruptId: i.id, status: "resolved", payload: { approved: true, ...(turn.edit ? { editedArgs: turn.edit } : {}) } }
      : { interruptId: i.id, status: "resolved", payload: { approved: false, reason: "not now" } },
  );
}

// A cut stream also rejects a promise of the client's own that nothing awaits; a browser
// logs that and goes on, and so does this script (they are reported, as `unhandled`).
const unhandled = [];
process.on("unhandledRejection", (e) => unhandled.push(String(e?.message ?? e)));

const turns = [];
let interrupts = [];
let pending = [];
for (const turn of plan.turns) {
  if (turn.user) agent.addMessage({ id: crypto.randomUUID(), role: "user", content: turn.user });
  for (const id of turn.answer !== undefined ? pending : []) {
    agent.addMessage({ id: crypto.randomUUID(), role: "tool", toolCallId: id, content: turn.answer });
  }
  const events = [];
  let outcome = null;
  const subscriber = {
    onEvent: ({ event }) => {
      events.push(event);
    },
    onRunFinishedEvent: (params) => {
      outcome = {
        outcome: params.outcome,
        interrupts: params.interrupts ?? [],
        pendingToolCallIds: params.pendingToolCallIds ?? [],
        result: params.result,
      };
    },
  };
  const parameters = { tools: turn.tools ?? [] };
  if (turn.resume) parameters.resume = resumeOf(turn, interrupts);
  if (turn.forwardedProps) parameters.forwardedProps = turn.forwardedProps;
  let error = null;
  const timer = setTimeout(() => {
    console.error(`turn ${turns.length} took longer than 60 s`);
    process.exit(1);
  }, 60_000);
  try {
    await agent.runAgent(parameters, subscriber);
  } catch (e) {
    error = { message: String(e.message ?? e), status: e.status ?? null };
  }
  clearTimeout(timer);
  interrupts = outcome?.interrupts ?? [];
  pending = outcome?.pendingToolCallIds ?? [];
  turns.push({ events, outcome, error });
}
console.log(JSON.stringify({ turns, messages: agent.messages, state: agent.state, unhandled }));
