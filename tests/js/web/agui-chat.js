// A chat page on AG-UI's own client, as an application builds one: `@ag-ui/client`'s
// HttpAgent against Agency's /agui route, the answer's text shown as it streams in, and a
// held tool call shown as an interrupt the user approves (the next run's `resume`). The
// query names the route (`api`), the key and the thread.
import { HttpAgent } from "@ag-ui/client";

const query = new URLSearchParams(location.search);
const agent = new HttpAgent({
  url: query.get("api"),
  headers: { Authorization: `Bearer ${query.get("key")}` },
  threadId: query.get("thread"),
});
window.shown = []; // each text the answer was shown with, in order

const root = document.getElementById("root");
root.innerHTML =
  '<p id="status">idle</p><ul id="messages"></ul><div id="interrupt"></div>' +
  '<form id="form"><input id="draft"><button id="send">send</button></form>';
const status = root.querySelector("#status");
const list = root.querySelector("#messages");
const held = root.querySelector("#interrupt");

function render() {
  list.replaceChildren(
    ...agent.messages.map((m) => {
      const item = document.createElement("li");
      item.className = m.role;
      const calls = (m.toolCalls ?? []).map((c) => `${c.function.name} ${c.function.arguments}`);
      item.textContent = [m.content ?? "", ...calls].filter(Boolean).join(" ");
      return item;
    }),
  );
}

function fail(error) {
  const shown = document.createElement("p");
  shown.id = "error";
  shown.textContent = String(error?.message ?? error);
  root.append(shown);
}

async function run(parameters) {
  status.textContent = "running";
  held.replaceChildren();
  let interrupts = [];
  try {
    await agent.runAgent(parameters, {
      onMessagesChanged: ({ messages }) => {
        const last = messages.at(-1);
        if (last?.role === "assistant" && last.content) window.shown.push(last.content);
        render();
      },
      onRunFinishedEvent: (params) => {
        interrupts = params.interrupts ?? [];
      },
      onRunErrorEvent: ({ event }) => fail(event.message),
    });
  } catch (error) {
    fail(error);
  }
  render();
  for (const interrupt of interrupts) {
    const button = document.createElement("button");
    button.id = "approve";
    button.textContent = `approve ${interrupt.reason}`;
    button.onclick = () =>
      run({
        resume: interrupts.map((i) => ({
          interruptId: i.id,
          status: "resolved",
          payload: { approved: true },
        })),
      });
    held.append(button);
  }
  status.textContent = interrupts.length ? "interrupted" : "idle";
}

root.querySelector("#form").onsubmit = (e) => {
  e.preventDefault();
  const draft = root.querySelector("#draft");
  agent.addMessage({ id: crypto.randomUUID(), role: "user", content: draft.value });
  draft.value = "";
  render();
  run({});
};
