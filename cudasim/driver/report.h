// The JSON report written at exit when CUDASIM_REPORT=FILE is set (schema in the README).
#pragma once

namespace cudasim {

struct State;

// Makes the calling process the report's writer (cuInit in a forked child that uses CUDA).
void claim_report();

// Writes the report for `st` to `path`; false on I/O failure.
bool write_report(State& st, const char* path);

}  // namespace cudasim
