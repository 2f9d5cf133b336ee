"""The benchmark families' jobs: each module one job, run through its family's script
(``python benchmarks/bench_FAMILY.py JOB --help``) or, for a job's own child processes, directly."""
