/**
 * A small agent loop audited by LoopX: a read, an idempotent write and an unsafe send, each journaled
 * before it runs, and a recovery that asks the gate after a crash.
 *
 *     LOOPX_TOKEN=lxr_... node dist/examples/agent-loop.js --url http://127.0.0.1:8000 --run demo-1 \
 *         --journal demo-1.jsonl --ledger world.jsonl --inbox inbox.txt [--crash-at POINT]
 *
 * The world is a file (`--ledger`): one JSON line per effect a receiver carried out. The draft store is
 * idempotent (one draft per key), the mailer is not (every send is a line). `--crash-at` kills this process
 * with SIGKILL at one of CRASH_POINTS, the way a host losing power would.
 *
 * Each turn runs in a turn session (`gate.turn`), which on every start claims back the turns of records the
 * server lacks, ships the local journal, and asks the gate before anything of the turn runs:
 * - `proceed`: claim, keep the lease, journal an operator's finding about the unsafe send as its readback,
 *   open a recovery audit when the turn had started before, and run only what the journal says is missing;
 * - `hold` (`TurnHeld`): print why and exit 3 (an unsafe send without a readback waits for an operator);
 * - `done`: nothing to do.
 * The unsafe send runs only after the server acknowledged its dispatch under the turn's fencing token.
 * Exit 0 when every turn is complete.
 */

import { closeSync, existsSync, fsyncSync, openSync, readFileSync, writeSync } from "node:fs";
import { parseArgs } from "node:util";

import { DEFAULT_PHASES, Gate, Journal, TurnHeld, type EffectClass, type TurnSession } from "../src/index.js";

const EXIT_DONE = 0;
const EXIT_HELD = 3;

export const CRASH_POINTS = [
  "t1-planned", // the plan is durable locally, never shipped
  "t1-shipped", // the plan is on the server, the turn not yet claimed
  "t1-read-dispatched", // inside the read, before it reads
  "t1-draft-dispatched", // the idempotent write journaled, not sent
  "t1-draft-written", // the write done, its readback not journaled
  "t1-reply-dispatched", // the unsafe send acknowledged by the server, not sent
  "t1-reply-sent", // the send done, its readback not journaled
  "t1-dispatch-committed",
  "t1-before-terminal",
  "t2-archive-written",
] as const;

interface Step {
  intent: string;
  effectClass: EffectClass;
  key?: boolean; // an idempotency key (the run, the turn and the intent)
}

interface TurnSpec {
  turn: string;
  lineage: string;
  work: Record<string, Step[]>;
}

const WORKLOAD: TurnSpec[] = [
  {
    turn: "t1",
    lineage: "inbox-reply",
    work: {
      dispatch: [
        { intent: "read", effectClass: "safe" },
        { intent: "draft", effectClass: "idempotent", key: true },
        { intent: "reply", effectClass: "unsafe" },
      ],
    },
  },
  { turn: "t2", lineage: "inbox-archive", work: { execute: [{ intent: "archive", effectClass: "idempotent", key: true }] } },
];

function crashHere(point: string, crashAt: string | undefined): void {
  if (point === crashAt) process.kill(process.pid, "SIGKILL");
}

/** The receivers, writing the effect ledger (one JSON line per effect carried out, fsynced). */
class World {
  constructor(readonly ledger: string, readonly inbox: string) {}

  private entries(): Record<string, unknown>[] {
    if (!existsSync(this.ledger)) return [];
    return readFileSync(this.ledger, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  private append(entry: Record<string, unknown>): void {
    const fd = openSync(this.ledger, "a");
    try {
      writeSync(fd, JSON.stringify(entry) + "\n");
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }

  read(): string { // safe: reads only
    return existsSync(this.inbox) ? readFileSync(this.inbox, "utf8") : "";
  }

  store(effect: string, key: string, text: string): void { // idempotent: one entry per key
    if (!this.entries().some((e) => e["key"] === key)) this.append({ chars: text.length, effect, key });
  }

  send(effect: string, text: string): void { // unsafe: every call is a send
    this.append({ chars: text.length, effect });
  }
}

class Agent {
  constructor(
    readonly journal: Journal,
    readonly gate: Gate,
    readonly world: World,
    readonly worker: string,
    readonly crashAt: string | undefined,
  ) {}

  async runToEnd(): Promise<number> {
    for (const spec of WORKLOAD) {
      if (!this.journal.planned().has(spec.turn)) { // what a session does itself; here to crash in between
        this.journal.plan(spec.turn, spec.lineage);
        crashHere(`${spec.turn}-planned`, this.crashAt);
        await this.gate.ship(this.journal);
        crashHere(`${spec.turn}-shipped`, this.crashAt);
      }
      try {
        await this.gate.turn(this.journal, spec.turn, { lineage: spec.lineage, workerId: this.worker }, (t) => this.work(t, spec));
      } catch (error) {
        if (error instanceof TurnHeld) {
          console.log(JSON.stringify({ held: { [spec.turn]: error.decision.reason ?? error.decision.decision } }));
          return EXIT_HELD;
        }
        throw error;
      }
    }
    console.log(JSON.stringify({ done: WORKLOAD.map((s) => s.turn) }));
    return EXIT_DONE;
  }

  /** The turn's work: a pure function of the journal (the session skips what is done). */
  async work(t: TurnSession, spec: TurnSpec): Promise<void> {
    for (const phase of DEFAULT_PHASES) {
      for (const step of spec.work[phase] ?? []) await this.effect(t, step);
      if (!t.committed().includes(phase)) {
        await t.commit(phase);
        await this.gate.ship(this.journal);
        crashHere(`${spec.turn}-${phase}-committed`, this.crashAt);
      }
    }
    crashHere(`${spec.turn}-before-terminal`, this.crashAt);
    await t.complete();
  }

  async effect(t: TurnSession, step: Step): Promise<void> {
    const turn = t.turn;
    const key = step.key ? `${this.journal.run}/${turn}/${step.intent}` : undefined;
    const name = `${turn}/${step.intent}`;
    const body = (): void => {
      crashHere(`${turn}-${step.intent}-dispatched`, this.crashAt);
      if (step.effectClass === "safe") this.world.read();
      else if (step.effectClass === "idempotent") this.world.store(name, key ?? "", "draft text");
      else this.world.send(name, "reply text");
      crashHere(`${turn}-${step.intent}-${step.effectClass === "unsafe" ? "sent" : "written"}`, this.crashAt);
    };
    await t.call(step.intent, step.effectClass, body, key === undefined ? {} : { key });
  }
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      url: { type: "string" },
      run: { type: "string" },
      journal: { type: "string" },
      ledger: { type: "string" },
      inbox: { type: "string", default: "inbox.txt" },
      worker: { type: "string", default: "example-agent" }, // a stable id: a restart takes its lease back
      "crash-at": { type: "string" },
    },
  });
  const crashAt = values["crash-at"];
  if (!values.url || !values.run || !values.journal || !values.ledger) {
    console.error("usage: agent-loop --url URL --run RUN --journal PATH --ledger PATH [--inbox PATH] [--crash-at POINT]");
    return 2;
  }
  if (crashAt !== undefined && !(CRASH_POINTS as readonly string[]).includes(crashAt)) {
    console.error(`--crash-at: one of ${CRASH_POINTS.join(", ")}`);
    return 2;
  }
  const token = process.env["LOOPX_TOKEN"];
  if (!token) {
    console.error("set LOOPX_TOKEN to a runtime API token (never on the command line)");
    return 2;
  }
  const journal = Journal.open(values.journal, { run: values.run });
  try {
    const agent = new Agent(journal, new Gate(values.url, token), new World(values.ledger, values.inbox ?? "inbox.txt"), values.worker ?? "example-agent", crashAt);
    return await agent.runToEnd();
  } finally {
    journal.close();
  }
}

if (process.argv.includes("--list-crash-points")) {
  console.log(JSON.stringify(CRASH_POINTS));
} else {
  process.exitCode = await main();
}
