"""``fence bench``: benchmarks that write their figures into evidence/.

Each benchmark is a module of ``fence.bench``; ``fleet`` is run by ``experiments_command``.
"""

from __future__ import annotations

import argparse

from fence.cli import arguments
from fence.base import output
from fence.checking.checking import PROFILES
from fence.base.errors import BadInput
from fence.model.plugins import absolute, load_destination, load_ledger, load_policy
from fence.model.policies import POLICIES


def bench_arguments(bench) -> None:
    """``fence bench``'s options, grouped by the benchmark each is for."""
    bench.add_argument(
        "what", choices=["detection", "counterexamples", "explorer", "fleet", "suite", "guard"],
        help="detection: each expected violation over many seeds; counterexamples: time to a first, "
        "minimised and proved-shortest counterexample per violated cell; explorer: states/s and time to "
        "exhaust each bound; fleet: worker processes on a database under SIGKILLs (and a restart); "
        "suite: the test suite's wall time; guard: what fence.guard costs per job on each shipped queue's "
        "own worker (evidence/guard-cost.txt)",
    )
    bench.add_argument("--policy", action="append",
                       help="only this policy (repeatable); explorer: also a user's MODULE:ATTR or FILE.py:ATTR, "
                       "and one named '<built-in> copy' is set beside that built-in")
    bench.add_argument("--destination", help="explorer: every row with this destination of yours (MODULE:ATTR or FILE.py:ATTR)")
    bench.add_argument("--ledger", help="explorer: every row with this ledger of yours (MODULE:ATTR or FILE.py:ATTR)")
    bench.add_argument("--time-budget", type=arguments.positive_seconds, default=60.0, help="explorer: seconds per bound")
    bench.add_argument("--seeds", type=arguments.positive, default=20, help="random seeds (default 20)")
    bench.add_argument("--profile", choices=PROFILES, default="default", help="search effort per seed")
    bench.add_argument("--workers", type=arguments.workers,
                       help="processes (default 2; fleet: 8 workers; guard: the library's worker processes)")
    output.add_options(
        bench, record="evidence/<what>.txt (fleet: evidence/fleet-<backend>.txt)",
        out_help="where <what>.txt goes (fleet: fleet-<backend>.txt; explorer: and its .png)",
        report="write the figures to FILE instead (explorer: and its plot beside it, as .png)",
    )
    explorer = bench.add_argument_group("explorer")
    explorer.add_argument(
        "--bound", action="append", type=arguments.explorer_bound, metavar="UxJxA:H",
        help="explorer: only this bound, units x jobs x attempts : horizon (e.g. 2x2x2:2; repeatable; "
        "default: the growing bounds of evidence/explorer.txt)",
    )
    explorer.add_argument("--symmetry", choices=["both", "on", "off"], default="both",
                          help="explorer: rows with jobs symmetric, without, or both (default; one job: without)")
    explorer.add_argument("--repeat", type=arguments.repeats, metavar="N",
                          help="explorer: explore each row N times, each in a fresh process, and report the median "
                          "run with the range (default 1); guard: rounds per queue, medians reported (default 3)")
    explorer.add_argument(
        "--engines", type=arguments.engines, metavar="ENGINE,...",
        help="explorer: a row per engine, of one-process, partitioned (2 processes owning states by fingerprint) "
        "and ray (2 actors of a local Ray cluster; needs fence[ray]); default one-process",
    )
    explorer.add_argument("--explorer-workers", type=arguments.workers, default=1,
                          help="explorer: processes sharing each exploration's levels, even where one is faster "
                          "(rows then run one at a time)")
    fleet = bench.add_argument_group("fleet")
    fleet.add_argument("--backend", choices=["sqlite", "postgres"], help="fleet: the database (default sqlite)")
    fleet.add_argument("--url", help="fleet: this backend URL instead (its fence tables are emptied)")
    fleet.add_argument("--jobs", type=arguments.positive,
                       help="fleet: jobs, and units of quota (default 2000); guard: jobs per run (default 500)")
    fleet.add_argument("--kill-every", type=arguments.non_negative_seconds, default=0.5,
                       help="fleet: SIGKILL a random busy worker every SECONDS (default 0.5; 0: never)")
    fleet.add_argument("--restart-db", action=argparse.BooleanOptionalAction, default=None,
                       help="fleet: restart PostgreSQL once half the jobs are done (default: on for postgres)")
    fleet.add_argument("--lease-seconds", type=arguments.positive_seconds, help="fleet: lease in seconds (default 1.0)")
    arguments.seconds_not_ticks(bench)
    fleet.add_argument("--janitors", type=arguments.workers, default=2, help="fleet: janitor processes (default 2)")
    fleet.add_argument("--seed", type=int, default=0, help="fleet: seed for the kills and the work times")
    fleet.add_argument("--time-limit", type=arguments.positive_seconds, default=600.0, help="fleet: give up after SECONDS per policy")
    from fence.bench.guard_queues import RUNNERS

    guard = bench.add_argument_group("guard")
    guard.add_argument("--queue", action="append", choices=list(RUNNERS),
                       help="guard: only this queue (repeatable; default every shipped queue)")
    guard.add_argument("--work-ms", type=arguments.positive_milliseconds, metavar="MS",
                       help="guard: each task first works MS milliseconds (a sleep), in both modes; the record goes to "
                       "guard-cost-work-<MS>ms.txt (default: no work, guard-cost.txt: the cheapest task)")
    arguments.server_options(
        guard, prefix="guard: ",
        uses={"postgres": "for the PostgreSQL queues and every effect", "redis": "for the Redis queues"},
        afterwards={"postgres": "; its bench tables are emptied", "redis": "; its database is emptied (FLUSHDB)"},
    )
    bench.set_defaults(handler=cmd_bench)


def cmd_bench(args) -> int:
    if args.what != "guard" and (args.queue or args.postgres or args.redis or args.work_ms):
        raise BadInput(f"--queue, --work-ms, --postgres and --redis are for 'fence bench guard', not {args.what}")
    if args.what == "guard":
        from fence.bench import guard_cost

        if args.backend or args.url or args.policy:
            raise BadInput("--backend, --url and --policy are not for 'fence bench guard': it runs every shipped "
                           "queue on its own server (choose with --queue)")
        work_ms = args.work_ms or 0.0
        out = output.report_file(args, "bench guard", f"guard-cost-work-{work_ms:g}ms.txt" if work_ms else "guard-cost.txt")
        return guard_cost.guard(
            args.queue or (), args.workers or 2, args.jobs or 500, args.repeat or 3,
            {"postgres": args.postgres, "redis": args.redis}, output.command_line("fence bench guard"), out, work_ms,
        )
    if args.what == "fleet":
        from fence.cli.experiments_command import cmd_fleet

        return cmd_fleet(args)
    if args.backend or args.url:
        raise BadInput(f"--backend and --url are for 'fence bench fleet', not {args.what}")
    args.workers = args.workers or 2

    examples, steps, _shrink = PROFILES[args.profile]
    command = output.command_line(f"fence bench {args.what}")
    names = args.policy or list(POLICIES)
    if args.what == "explorer" and args.engines and "ray" in args.engines.split(","):
        from fence.explore.transports import ray_problem

        if problem := ray_problem("local"):
            raise BadInput(problem)
    if args.what != "explorer" and args.engines:
        raise BadInput(f"--engines is for 'fence bench explorer', not {args.what}")
    if args.what == "explorer":
        # A user's policy is benchmarked like a built-in: loaded here once to refuse a bad spec
        # in one line, then again in each row's own process (by an absolute path).
        names = [name if name in POLICIES else absolute(name) for name in names]
        for name in names:
            load_policy(name)
        if args.destination:
            load_destination(args.destination)
        if args.ledger:
            load_ledger(args.ledger)
    elif args.destination or args.ledger:
        raise BadInput(f"--destination and --ledger are for 'fence bench explorer', not {args.what}")
    unknown = [name for name in names if name not in POLICIES and args.what != "explorer"]
    if unknown:
        raise BadInput(f"unknown policy {unknown[0]!r}: use one of {', '.join(POLICIES)}")
    out = output.report_file(args, f"bench {args.what}", f"{args.what}.txt")
    if args.what == "explorer":
        from fence.bench import explorer_cost

        return explorer_cost.explorer(
            names, args.time_budget, args.workers, command, out, bounds=args.bound or explorer_cost.EXPLORER_BOUNDS,
            symmetry=args.symmetry, explorer_workers=args.explorer_workers, repeat=args.repeat or 1,
            plugins=(absolute(args.destination), absolute(args.ledger)),
            engines=([explorer_cost.ENGINES[name] for name in args.engines.split(",")] if args.engines
                     else (explorer_cost.ONE_PROCESS,)),
        )
    if args.what == "counterexamples":
        from fence.bench.counterexample_times import counterexamples

        return counterexamples(args.seeds, examples, steps, args.workers, command, out, args.policy or ())
    if args.what == "suite":
        from fence.bench.suite_time import suite

        return suite(command, out)
    from fence.bench.detection import detection

    return detection(args.seeds, examples, steps, args.workers, command, out, args.policy or ())
