// The Vercel AI SDK (`ai`) as a chat app runs it, against Agency's /aisdk routes: its
// `AbstractChat` (what `useChat` wraps) with its `DefaultChatTransport`, which posts the
// chat and reads the UI message stream with the SDK's own parser and schema.
//
//   node aisdk.mjs SCENARIO '{"text": "...", ...}'
//
// AISDK_API is the chat's URL (`…/aisdk/{agency}/{blueprint}/chat`, a test proxy's as the
// case may be), AISDK_KEY the tenant's key. Each scenario prints one JSON line; the test
// asserts on it. Any uncaught error fails the script (exit status 1, the error on stderr).
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";

const api = process.env.AISDK_API;
const key = process.env.AISDK_KEY;
const [scenario, raw] = process.argv.slice(2);
const params = JSON.parse(raw ?? "{}");
const deadline = Date.now() + Number(process.env.AISDK_TIMEOUT_MS ?? 60000);

// What a framework's chat state keeps (React's, Vue's): the messages and the status.
class State {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (message) => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

function transport(options = {}) {
  return new DefaultChatTransport({
    api,
    headers: { Authorization: `Bearer ${key}` },
    ...options,
  });
}

function newChat(options = {}) {
  const errors = [];
  const chat = new Chat({
    id: params.chatId ?? crypto.randomUUID(),
    transport: transport(),
    onError: (error) => errors.push(String(error?.message ?? error)),
    ...options,
  });
  return { chat, errors };
}

async function until(check, what) {
  for (;;) {
    if (check()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const report = (chat, errors, extra = {}) => ({
  id: chat.id,
  status: chat.status,
  errors,
  messages: chat.messages,
  ...extra,
});

const scenarios = {
  // One user message; the answer streamed into the assistant message.
  async send({ text }) {
    const { chat, errors } = newChat();
    await chat.sendMessage({ text });
    return report(chat, errors);
  },

  // A tool call that waits for an approval; the user answers and the SDK sends the
  // answer on by itself (`sendAutomaticallyWhen`), the run goes on in the same message.
  async approve({ text, approved, reason }) {
    const { chat, errors } = newChat({
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text });
    const paused = structuredClone(chat.messages);
    const requests = chat.messages
      .at(-1)
      .parts.filter((part) => part.state === "approval-requested");
    if (requests.length === 0) throw new Error(`no approval request: ${JSON.stringify(paused)}`);
    for (const part of requests) {
      await chat.addToolApprovalResponse({ id: part.approval.id, approved, reason });
    }
    const last = () => chat.messages.at(-1).parts.filter((p) => p.type.startsWith("tool-"));
    await until(
      () =>
        chat.status === "ready" &&
        last().every((p) => ["output-available", "output-denied", "output-error"].includes(p.state)),
      "the run to go on after the approval",
    );
    await until(() => chat.status === "ready" || chat.status === "error", "the stream's end");
    return report(chat, errors, { paused });
  },

  // The stream is cut mid-answer (by the proxy in front of the API); the chat resumes it
  // with the resume route and gets the whole message.
  async cut({ text }) {
    const { chat, errors } = newChat();
    await chat.sendMessage({ text });
    const before = structuredClone(chat.messages);
    const statusBefore = chat.status;
    await chat.resumeStream();
    return report(chat, errors, { before, statusBefore });
  },

  // The resume route of a chat with no run under way: 204, which the transport reads as
  // nothing to resume.
  async idle() {
    const stream = await transport().reconnectToStream({ chatId: params.chatId });
    return { stream: stream === null ? null : "a stream" };
  },

  // The resume route by itself, read with the transport's own parser: the chunks.
  async reconnect() {
    const stream = await transport().reconnectToStream({ chatId: params.chatId });
    if (stream === null) return { chunks: null };
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    return { chunks };
  },

  // What the transport throws: a chat of another tenant, or a body the API refuses.
  async refused({ text, body }) {
    const options = body ? { prepareSendMessagesRequest: () => ({ body }) } : {};
    const { chat, errors } = newChat({ transport: transport(options) });
    await chat.sendMessage({ text: text ?? "hello" });
    let reconnect = null;
    if (params.reconnect) {
      try {
        await transport().reconnectToStream({ chatId: params.reconnect });
        reconnect = "answered";
      } catch (error) {
        reconnect = String(error.message);
      }
    }
    return report(chat, errors, { reconnect });
  },
};

const run = scenarios[scenario];
if (!run) throw new Error(`no scenario ${scenario}`);
const timer = setTimeout(() => {
  console.error(`scenario ${scenario} took longer than its deadline`);
  process.exit(1);
}, deadline - Date.now());
const out = await run(params);
clearTimeout(timer);
console.log(JSON.stringify(out));
