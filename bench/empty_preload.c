// An empty library, preloaded as the baseline of bench/startup.py: what preloading any library costs.
int gpumem_bench_empty_preload;
