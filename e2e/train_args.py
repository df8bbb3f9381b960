"""The `linea train` arguments that run in one process what a `linea master` with the given
arguments runs: the reference a distributed job's model is compared with, bit for bit.

    python3 e2e/train_args.py --model PATH [--data PATH] -- master ARGS...

prints one argument a line. The master's networking (with --allreduce, the way exact sums
travel), security, checkpoint and start-up flags (each takes one value, and none changes the
model) are dropped; --model, and --data when
given, are replaced. One list for every e2e script, so a new master-only flag is added once.
A master without --algorithm runs SCD, while `linea train` then chooses one from the data
(--algorithm auto), so the reference names it: --algorithm scd.
"""
import sys

MASTER_ONLY = {
    "--listen", "--secret-file", "--checkpoint", "--tls-dir", "--metrics-listen",
    "--wait-for-workers", "--wait-for-workers-timeout", "--allreduce",
}


def main(argv):
    split = argv.index("--")
    options, master = dict(zip(argv[:split:2], argv[1:split:2])), argv[split + 1:]
    assert master[0] == "master", master
    out, skip = ["train"], False
    for arg in master[1:]:
        if skip:
            skip = False
        elif arg in MASTER_ONLY:
            skip = True
        else:
            out.append(arg)
    for flag, value in options.items():
        out[out.index(flag) + 1] = value
    if "--algorithm" not in out:
        out += ["--algorithm", "scd"]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
