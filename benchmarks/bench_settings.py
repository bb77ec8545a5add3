"""Settings for benchmarks/bench_reads.py: the project's settings with one extra baseline URL."""

from loopx_site.settings import *  # noqa: F403 - the very same configuration, plus the URL below

ROOT_URLCONF = "benchmarks.bench_urls"
