/**
 * flock(2) as the simulated world takes it (lib/lockfile.ts `useFlock`): an
 * exclusive lock per inode, held by one open file and dropped when that file
 * is closed or its process killed. The kernel wakes a lock's waiters in an
 * order of its own; here the next holder is drawn by the PRNG when the lock
 * is dropped, and told through an event, so a run replays alike.
 */
import type { Proc, Scheduler } from "./scheduler.ts";

interface Waiter {
  proc: Proc;
  file: Deno.FsFile;
  grant: () => void;
  granted?: boolean;
}

interface Lock {
  holder?: Deno.FsFile;
  waiters: Waiter[];
}

/** The locks of every simulated node (one kernel: the state dirs are on one disk). */
export class SimLocks {
  readonly #sched: Scheduler;
  readonly #locks = new Map<string, Lock>();
  /** Every file handed to flock and still open, with its own close. */
  readonly #open = new Map<Deno.FsFile, () => void>();

  constructor(sched: Scheduler) {
    this.#sched = sched;
  }

  /** The `Flock` lib/lockfile.ts is given. */
  readonly flock = (file: Deno.FsFile): Promise<void> => {
    const info = file.statSync();
    const key = `${info.dev}:${info.ino}`;
    const proc = this.#sched.current();
    let lock = this.#locks.get(key);
    if (!lock) this.#locks.set(key, lock = { waiters: [] });
    const l = lock;
    const raw = file.close.bind(file);
    let open = true;
    const close = () => {
      if (!open) return;
      open = false;
      this.#open.delete(file);
      if (l.holder === file) this.#drop(key, l);
      l.waiters = l.waiters.filter((w) => w.file !== file);
      try {
        raw();
      } catch {
        // Closed already.
      }
    };
    this.#open.set(file, close);
    file.close = close;
    proc.onKill.push(close);
    if (!l.holder) {
      l.holder = file;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      l.waiters.push({ proc, file, grant: resolve });
    });
  };

  /** Closes every lock file still open (the run is over: its processes wait forever). */
  closeAll(): void {
    for (const close of [...this.#open.values()]) close();
  }

  #drop(key: string, l: Lock): void {
    l.holder = undefined;
    l.waiters = l.waiters.filter((w) => w.proc.alive);
    if (!l.waiters.length) {
      this.#locks.delete(key);
      return;
    }
    const rng = this.#sched.rng("locks");
    const w = l.waiters.splice(Math.floor(rng.next() * l.waiters.length), 1)[0];
    // Held from now: no other file takes it before the waiter runs (its event does).
    l.holder = w.file;
    this.#sched.after(0, `${w.proc.name} lock`, () => w.grant(), w.proc);
  }
}
