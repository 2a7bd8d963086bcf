"""Runs a documented example as ctest does and checks it the way a user would:
the command's exit status is 0 AND every expected line is in its output.

    run_example.py --expect TEXT [--expect TEXT ...] -- COMMAND [ARGS...]

ctest's PASS_REGULAR_EXPRESSION alone would ignore the exit status (a launcher
that printed task 0's result and then failed the gang would pass), so the
examples go through this instead. Not a pytest file (no test_ prefix): ctest
runs it directly.
"""

import subprocess
import sys


def main(argv):
    expected = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] != "--expect" or i + 1 >= len(argv):
            print(f"run_example.py: unexpected argument {argv[i]!r} "
                  "(usage: --expect TEXT ... -- COMMAND ...)", file=sys.stderr)
            return 2
        expected.append(argv[i + 1])
        i += 2
    command = argv[i + 1:]
    if not command:
        print("run_example.py: no command after --", file=sys.stderr)
        return 2

    # stderr joins stdout so that ctest's log shows one interleaved record.
    proc = subprocess.run(command, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(proc.stdout)
    failed = False
    if proc.returncode != 0:
        print(f"run_example.py: {command[0]} exited with status "
              f"{proc.returncode} (a negative status is the signal that "
              "killed it); the output above says which task failed",
              file=sys.stderr)
        failed = True
    for text in expected:
        if text not in proc.stdout:
            print(f"run_example.py: {command[0]} never printed {text!r}; "
                  "check the example's output above", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
