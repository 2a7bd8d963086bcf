"""A PySpark-style barrier job: every task of the gang counts its share of
the input, the gang agrees on the total, and task 0 reports it.

    build/bin/cohort launch -n 4 -- \\
        env PYTHONPATH=build/python python3 examples/python/barrier_job.py 1000000

From PySpark it moves over by replacing `pyspark.BarrierTaskContext` with
`cohort.BarrierTaskContext`: the method names are the same.
"""

import json
import sys

import cohort


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    ctx = cohort.BarrierTaskContext.get()
    me, tasks = ctx.partitionId(), ctx.numTasks()

    # This partition's slice of 0..n-1, and its sum of squares.
    lo, hi = me * n // tasks, (me + 1) * n // tasks
    partial = sum(i * i for i in range(lo, hi))

    ctx.barrier()  # every task is up before anyone reports
    shares = [json.loads(m) for m in ctx.allGather(json.dumps({"sum": partial}))]
    total = sum(s["sum"] for s in shares)
    assert total == (n - 1) * n * (2 * n - 1) // 6, "the gang lost a share"

    # The job's key-value store: the total for anyone who asks later.
    kv = cohort.coordination_client()
    if me == 0:
        kv.set("result/sum_of_squares", str(total))
        addresses = [t.address for t in ctx.getTaskInfos()]
        print(f"{tasks} tasks at {', '.join(addresses)}: "
              f"sum of squares below {n} = {total} (attempt {ctx.attemptNumber()})")
    print(f"partition {me}: result {kv.get('result/sum_of_squares', timeout=60).decode()}")


if __name__ == "__main__":
    main()
