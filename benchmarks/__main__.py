import sys

if "--vs-max" in sys.argv[1:]:  # side by side with MAX 26.7 (benchmarks/vs_max.py)
    from benchmarks.vs_max import main
else:
    from benchmarks.run import main

raise SystemExit(main())
