// A chat page as the AI SDK's docs build one: `useChat` (@ai-sdk/react) with its
// `DefaultChatTransport`, `resume` to rejoin a run after a reload, and approvals sent on
// by the SDK itself. The query names the chat route (`api`), the key and the chat's id;
// `resume=1` is how the page comes back to a chat it knows.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { useState } from "react";
import { createRoot } from "react-dom/client";

const query = new URLSearchParams(location.search);
window.shown = [];

function Part({ part }) {
  if (part.type === "text") return <li className="text">{part.text}</li>;
  if (!part.type.startsWith("tool-")) return null;
  return (
    <li className="tool" data-state={part.state}>
      {`${part.type} ${part.state} ${part.output ?? ""}`}
    </li>
  );
}

function Chat() {
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    id: query.get("chat"),
    resume: query.get("resume") === "1",
    transport: new DefaultChatTransport({
      api: query.get("api"),
      headers: { Authorization: `Bearer ${query.get("key")}` },
    }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [draft, setDraft] = useState("");
  window.shown.push(messages.map((m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("")));
  const waiting = messages.flatMap((m) => m.parts).filter((p) => p.state === "approval-requested");
  return (
    <main>
      <p id="status">{status}</p>
      {error && <p id="error">{error.message}</p>}
      <ul id="messages">
        {messages.map((m) => (
          <li key={m.id} className={m.role}>
            <ul>{m.parts.map((p, i) => <Part key={i} part={p} />)}</ul>
          </li>
        ))}
      </ul>
      {waiting.map((p) => (
        <button key={p.approval.id} id="approve"
          onClick={() => addToolApprovalResponse({ id: p.approval.id, approved: true })}>
          approve {p.type}
        </button>
      ))}
      <form onSubmit={(e) => { e.preventDefault(); sendMessage({ text: draft }); setDraft(""); }}>
        <input id="draft" value={draft} onChange={(e) => setDraft(e.target.value)} />
        <button id="send">send</button>
      </form>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
