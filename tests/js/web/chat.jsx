// A small chat page on `useStream` from @langchain/langgraph-sdk/react, as a frontend built
// on the SDK is written. Its settings come from the page's address:
//   index.html?api=<the API's /langgraph URL>&key=<key>&assistant=<name>[&thread=<id>]
// The thread it starts is put in the address, so that a reload comes back to it; the run in
// progress is rejoined after a reload (`reconnectOnMount`).
import { useStream } from "@langchain/langgraph-sdk/react";
import { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";

const query = new URLSearchParams(location.search);

function text(message) {
  if (typeof message.content === "string") return message.content;
  return message.content.map((part) => part.text ?? "").join("");
}

// What the page showed, render after render (the tests read it: tokens arriving one by
// one are several texts of one message, each longer than the last).
window.shown = window.shown ?? [];

function Chat() {
  const [threadId, setThreadId] = useState(query.get("thread"));
  const thread = useStream({
    apiUrl: query.get("api"),
    apiKey: query.get("key"),
    assistantId: query.get("assistant"),
    threadId,
    onThreadId: (id) => {
      setThreadId(id);
      const next = new URL(location.href);
      next.searchParams.set("thread", id);
      history.replaceState(null, "", next);
    },
    reconnectOnMount: true,
  });
  const [draft, setDraft] = useState("");
  const messages = thread.messages;
  useEffect(() => {
    window.shown.push(messages.map((m) => ({ id: m.id, type: m.type, text: text(m) })));
  });
  const interrupt = thread.interrupt;
  return (
    <main>
      <ol id="messages">
        {messages.map((m, i) => (
          <li key={m.id ?? i} className={`message ${m.type}`} data-id={m.id}>
            {text(m)}
          </li>
        ))}
      </ol>
      {interrupt?.value?.action_requests ? (
        <section id="interrupt">
          {interrupt.value.action_requests.map((r) => (
            <p key={r.id ?? r.name} className="request">{`${r.name} ${JSON.stringify(r.args)}`}</p>
          ))}
          <button
            id="approve"
            onClick={() =>
              thread.submit(undefined, { command: { resume: { decisions: [{ type: "approve" }] } } })
            }
          >
            Approve
          </button>
        </section>
      ) : null}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          thread.submit({ messages: [{ type: "human", content: draft }] });
          setDraft("");
        }}
      >
        <input id="draft" value={draft} onChange={(event) => setDraft(event.target.value)} />
        <button id="send" type="submit" disabled={thread.isLoading}>
          Send
        </button>
      </form>
      <p id="status">{thread.isLoading ? "running" : "idle"}</p>
      {thread.error ? <p id="error">{String(thread.error?.message ?? thread.error)}</p> : null}
    </main>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
