// The LangGraph JS SDK as an application runs it, against Agency's /langgraph routes.
//
//   node sdk.mjs SCENARIO '{"text": "...", ...}'
//
// LG_URL is the API's /langgraph URL (a test proxy's, as the case may be), LG_KEY the
// tenant's key. Each scenario prints what the SDK gave it as one JSON line; the test
// asserts on it. Any error fails the script (exit status 1, the error on stderr); a
// scenario that takes longer than LG_TIMEOUT_MS (60 s) fails too.
import { Client } from "@langchain/langgraph-sdk";
import WebSocket from "ws";

const url = process.env.LG_URL;
const key = process.env.LG_KEY;
const [scenario, raw] = process.argv.slice(2);
const params = JSON.parse(raw ?? "{}");
const client = new Client({ apiUrl: url, apiKey: key });
const ask = (text) => ({ messages: [{ role: "user", content: text }] });

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push({ event: part.event, data: part.data, id: part.id });
  return parts;
}

// The SDK's errors say what was asked of the server, not which call asked it.
async function step(name, promise) {
  try {
    return await promise;
  } catch (error) {
    error.message = `${name}: ${error.message}`;
    throw error;
  }
}

async function until(check) {
  for (;;) {
    const value = await check();
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const scenarios = {
  // What Agent Chat UI asks first: is there a server at this URL, with this key?
  async info() {
    const answers = {};
    for (const path of ["/info", "/ok"]) {
      const response = await fetch(`${url}${path}`, { headers: { "X-Api-Key": key } });
      answers[path] = { status: response.status, body: await response.text() };
    }
    return answers;
  },

  // A thread named by the client, with no assistant (as UIs do), then a run on it.
  async named({ text, graph = "worker" }) {
    const id = crypto.randomUUID();
    const thread = await step("threads.create({threadId})", client.threads.create({ threadId: id }));
    const values = await step("runs.wait on it", client.runs.wait(id, graph, { input: ask(text) }));
    return { id, thread, values };
  },

  // A run on a thread that does not exist yet, created by the run (ifNotExists: "create").
  async createdByRun({ text, graph = "worker" }) {
    const id = crypto.randomUUID();
    const values = await step(
      'runs.wait(new id, {ifNotExists: "create"})',
      client.runs.wait(id, graph, { input: ask(text), ifNotExists: "create" }),
    );
    const got = await step("threads.get(that id)", client.threads.get(id));
    return { id, values, got };
  },

  // threads.create, then runs.stream in the given modes; the SDK reconnects by itself
  // (the answer's Location, Last-Event-ID) when the stream is cut while the run goes on.
  async stream({ text, modes, graph = "worker" }) {
    const thread = await client.threads.create({ graphId: graph });
    let created;
    const parts = await collect(
      client.runs.stream(thread.thread_id, graph, {
        input: ask(text),
        streamMode: modes,
        onRunCreated: (meta) => (created = meta),
      }),
    );
    const state = await client.threads.getState(thread.thread_id);
    return { thread, created, parts, state };
  },

  // runs.wait, then the thread's history as checkpoints, newest first.
  async wait({ text, graph = "worker" }) {
    const thread = await client.threads.create({ graphId: graph });
    const values = await client.runs.wait(thread.thread_id, graph, { input: ask(text) });
    const history = await client.threads.getHistory(thread.thread_id, { limit: 10 });
    const got = await client.threads.get(thread.thread_id);
    return { thread, values, history, got };
  },

  // A background run started in `started` modes, followed with joinStream in `modes`
  // (none: the run's own) from `lastEventId` (none: from now on; "-1": from its start, as
  // useStream rejoins), then joined.
  async join({ text, modes, started, lastEventId, graph = "worker" }) {
    const thread = await client.threads.create({ graphId: graph });
    const run = await client.runs.create(thread.thread_id, graph, {
      input: ask(text),
      streamMode: started,
    });
    const parts = await collect(
      client.runs.joinStream(thread.thread_id, run.run_id, { streamMode: modes, lastEventId }),
    );
    const joined = await client.runs.join(thread.thread_id, run.run_id);
    const runs = await client.runs.list(thread.thread_id);
    return { thread, run, parts, joined, runs };
  },

  // A run that stops for approval, resumed with command.resume in a new stream.
  async interrupt({ text, modes, resume, graph = "approver" }) {
    const thread = await client.threads.create({ graphId: graph });
    const paused = await collect(
      client.runs.stream(thread.thread_id, graph, { input: ask(text), streamMode: modes }),
    );
    const state = await client.threads.getState(thread.thread_id);
    const waiting = await client.threads.get(thread.thread_id);
    const resumed = await collect(
      client.runs.stream(thread.thread_id, graph, { command: { resume }, streamMode: modes }),
    );
    const after = await client.threads.get(thread.thread_id);
    const history = await client.threads.getHistory(thread.thread_id, { limit: 20 });
    return { thread, paused, state, waiting, resumed, after, history };
  },

  // What LangGraph's server takes beyond plain input: a message with an image, a run
  // from a past checkpoint, a run after some seconds, and command.goto (with an update of
  // [key, value] pairs) on an interrupt, then as a Send of the pending tool call.
  async beyondInput({ text, image, later, paused, sent, graph = "worker" }) {
    const thread = await client.threads.create({ graphId: graph });
    const content = [{ type: "text", text }, { type: "image_url", image_url: { url: image } }];
    const first = await client.runs.wait(thread.thread_id, graph, {
      input: { messages: [{ role: "user", content }] },
    });
    const checkpointId = (await client.threads.getState(thread.thread_id)).checkpoint.checkpoint_id;
    await client.runs.wait(thread.thread_id, graph, { input: ask(`${text} again`) });
    const branched = await client.runs.wait(thread.thread_id, graph, {
      input: ask(later), checkpointId,
    });
    const delayed = await client.runs.create(thread.thread_id, graph, {
      input: ask(later), afterSeconds: 1,
    });
    const joined = await client.runs.join(thread.thread_id, delayed.run_id);
    const approver = await client.threads.create({ graphId: "approver" });
    await client.runs.wait(approver.thread_id, "approver", { input: ask(paused) });
    const skipped = await client.runs.wait(approver.thread_id, "approver", {
      // The update as LangGraph's list of [key, value] writes.
      command: { goto: "model", update: [["messages", [{ role: "user", content: "skip it" }]]] },
    });
    // command.goto as a Send to "tools" of the call the run paused before (it runs).
    const sender = await client.threads.create({ graphId: "approver" });
    await client.runs.wait(sender.thread_id, "approver", { input: ask(sent) });
    const pending = (await client.threads.getState(sender.thread_id)).values.messages.at(-1);
    const toolCall = pending.tool_calls[0];
    const ran = await client.runs.wait(sender.thread_id, "approver", {
      command: { goto: [{ node: "tools", input: { tool_call: toolCall } }] },
    });
    return { first, branched, delayed, joined, skipped, ran };
  },

  // The active run canceled, waiting until it ended.
  async cancel({ text, graph = "worker" }) {
    const thread = await client.threads.create({ graphId: graph });
    const run = await client.runs.create(thread.thread_id, graph, { input: ask(text) });
    await until(async () => (await client.runs.get(thread.thread_id, run.run_id)).status === "running");
    await client.runs.cancel(thread.thread_id, run.run_id, true);
    const after = await client.runs.get(thread.thread_id, run.run_id);
    const got = await client.threads.get(thread.thread_id);
    return { thread, run, after, got };
  },
  // The thread protocol (threads.stream): run.start, then the thread's events as they come
  // until the run ends; with `resume`, the interrupt it stops at answered with input.respond
  // and the rest of the run read on the same subscription.
  async threadStream({ text, resume, graph = "worker" }) {
    const threadId = crypto.randomUUID();
    const thread = client.threads.stream(threadId, { assistantId: graph });
    const started = await step("run.start", thread.run.start({ input: ask(text) }));
    const channels = ["lifecycle", "messages", "tools", "input", "values"];
    const subscription = await step("subscribe", thread.subscribe(channels));
    const read = async () => {
      const events = [];
      for await (const e of subscription) {
        events.push({ id: e.event_id, seq: e.seq, method: e.method, node: e.params.node, data: e.params.data });
      }
      return events;
    };
    const first = await read();
    const output = (await thread.output)?.messages?.map((m) => m.content) ?? null;
    const interrupts = thread.interrupts.map((i) => ({ ...i }));
    let resumed = null;
    if (resume !== undefined) {
      const { interruptId, namespace } = interrupts[0];
      await step(
        "input.respond",
        thread.input.respond({ interrupt_id: interruptId, namespace, response: resume }),
      );
      resumed = await read();
    }
    await thread.close();
    const state = await client.threads.getState(threadId);
    return { threadId, started, first, output, interrupts, resumed, state };
  },

  // The thread protocol's other commands: a message injected while the run works, then the
  // state, the checkpoints, the agent tree, and a fork at the first checkpoint with input.
  async threadCommands({ text, inject, fork, graph = "manager" }) {
    const threadId = crypto.randomUUID();
    const thread = client.threads.stream(threadId, { assistantId: graph });
    await step("run.start", thread.run.start({ input: ask(text) }));
    const subscription = await step("subscribe", thread.subscribe(["lifecycle", "messages"]));
    let injected = false;
    for await (const e of subscription) {
      if (!injected && e.method === "messages") {
        // The model is streaming its first answer: the run takes the message up next.
        await step("input.inject", thread.input.inject({ namespace: [], message: { role: "user", content: inject } }));
        injected = true;
      }
      if (e.method === "lifecycle" && ["completed", "failed"].includes(e.params.data.event)) break;
    }
    const state = await step("state.get", thread.state.get({ namespace: [] }));
    const some = await step("state.get keys", thread.state.get({ namespace: [], keys: ["todos"] }));
    const checkpoints = await step("state.listCheckpoints", thread.state.listCheckpoints({ limit: 50 }));
    const older = await step(
      "state.listCheckpoints before",
      thread.state.listCheckpoints({ limit: 2, before: checkpoints.checkpoints[1].id }),
    );
    const tree = await step("agent.getTree", thread.agent.getTree({}));
    const first = checkpoints.checkpoints.at(-1).id;
    const forked = await step("state.fork", thread.state.fork({ checkpoint_id: first, input: ask(fork) }));
    const forkValues = await step("join the fork's run", client.runs.join(forked.thread_id, forked.run_id));
    await thread.close();
    return { threadId, state, some, checkpoints, older, tree, forked, forkValues };
  },

  // The thread protocol over a WebSocket: as a browser opens one (no header: the key in the
  // URL, through the SDK's webSocketFactory), a run streamed and an interrupt answered.
  async threadSocket({ text, resume, graph = "approver", header = false }) {
    const threadId = crypto.randomUUID();
    const opened = [];
    const webSocketFactory = (socketUrl) => {
      opened.push(socketUrl.replace(key, "KEY"));
      return header
        ? new WebSocket(socketUrl, { headers: { "x-api-key": key } })
        : new WebSocket(`${socketUrl}?access_token=${encodeURIComponent(key)}`);
    };
    const bare = new Client({ apiUrl: url, apiKey: null });
    const thread = bare.threads.stream(threadId, { assistantId: graph, transport: "websocket", webSocketFactory });
    const started = await step("run.start", thread.run.start({ input: ask(text) }));
    const subscription = await step("subscribe", thread.subscribe(["lifecycle", "messages", "tools", "input"]));
    const read = async () => {
      const events = [];
      for await (const e of subscription) {
        events.push({ id: e.event_id, method: e.method, data: e.params.data });
      }
      return events;
    };
    const first = await read();
    const interrupts = thread.interrupts.map((i) => ({ ...i }));
    let resumed = null;
    if (resume !== undefined && interrupts.length) {
      const { interruptId, namespace } = interrupts[0];
      await step("input.respond", thread.input.respond({ interrupt_id: interruptId, namespace, response: resume }));
      resumed = await read();
    }
    const state = await step("state.get", thread.state.get({ namespace: [] }));
    await thread.close();
    return { threadId, opened, started, first, interrupts, resumed, state };
  },

  // Another tenant's thread through the thread protocol: each call's error.
  async threadStreamOf({ threadId, graph = "worker" }) {
    const thread = client.threads.stream(threadId, { assistantId: graph, maxReconnectAttempts: 0 });
    const failed = async (promise) => {
      try {
        await promise;
        return null;
      } catch (error) {
        return { status: error.status ?? null, message: error.message };
      }
    };
    const subscribe = await failed(thread.subscribe(["values"]));
    const respond = await failed(
      thread.input.respond({ interrupt_id: "i", namespace: [], response: true }),
    );
    await thread.close();
    return { subscribe, respond };
  },
};

const timer = setTimeout(() => {
  console.error(`${scenario}: no end in ${process.env.LG_TIMEOUT_MS ?? 60000} ms`);
  process.exit(3);
}, Number(process.env.LG_TIMEOUT_MS ?? 60000));

try {
  if (!scenarios[scenario]) throw new Error(`no scenario ${scenario}`);
  console.log(JSON.stringify(await scenarios[scenario](params)));
} catch (error) {
  console.error(error?.stack ?? String(error));
  if (error?.cause) console.error("cause:", error.cause?.stack ?? error.cause);
  process.exitCode = 1;
} finally {
  clearTimeout(timer);
}
