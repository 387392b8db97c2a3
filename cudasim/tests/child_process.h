// Running a test program as a child process and reading what it printed and the simulator's
// report it left: shared by the runtime tests (runtime_child.c, exit_child.cpp) and the driver
// tests (exit_child.cpp), with what exit_child.cpp prints when all is well.
#pragma once

#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

extern char** environ;

namespace runtime_test {

using Observations = std::map<std::string, std::string>;

// Invariant: `observations` holds the child's "key=value" lines; `exit_code` is -1 unless it
// exited normally.
struct ChildRun {
  int exit_code = -1;
  Observations observations;
};

// A scratch folder removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cudasim-child-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `program scenario` with the current environment plus `overrides`, collecting its output.
inline ChildRun run_child(const std::string& program, const std::string& scenario,
                   const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string line = *entry;
    if (!overrides.contains(line.substr(0, line.find('=')))) environment.push_back(line);
  }
  for (const auto& [key, value] : overrides) environment.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& line : environment) envp.push_back(line.data());
  envp.push_back(nullptr);
  std::string program_copy = program;
  std::string scenario_copy = scenario;
  char* argv[] = {program_copy.data(), scenario_copy.data(), nullptr};

  int pipe_fds[2];
  ChildRun run;
  if (pipe(pipe_fds) != 0) return run;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t got; (got = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) output.append(buffer, static_cast<size_t>(got));
  close(pipe_fds[0]);
  if (spawned != 0) return run;
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const size_t equals = line.find('=');
    if (equals != std::string::npos) run.observations[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return run;
}

// A child run with CUDASIM_REPORT pointing into a scratch folder, and the report it left there
// (a discarded value when there is none, or it is no JSON).
struct ReportedRun {
  ChildRun run;
  nlohmann::json report;
};

inline ReportedRun run_child_with_report(const std::string& program, const std::string& scenario,
                                         std::map<std::string, std::string> overrides) {
  ScratchDir scratch;
  const std::string report_path = scratch.path() + "/report.json";
  overrides["CUDASIM_REPORT"] = report_path;
  ReportedRun reported{run_child(program, scenario, overrides), nlohmann::json::value_t::discarded};
  std::ifstream report_file(report_path);
  if (!scratch.path().empty() && report_file.good())
    reported.report = nlohmann::json::parse(report_file, nullptr, false);
  return reported;
}

// What a run of exit_child.cpp (`program`, with the environment `overrides`) shows: its exit code,
// the lines it printed, and the counters of device 0 its calls move in the report it left, as
// "report.<key>" ("report.pool.async_allocs" for an object's member), or "report" = "missing".
inline Observations exit_child_observed(const std::string& program, const std::map<std::string, std::string>& overrides) {
  const ReportedRun reported = run_child_with_report(program, "", overrides);
  Observations observed = reported.run.observations;
  observed["exit_code"] = std::to_string(reported.run.exit_code);
  if (reported.report.is_discarded()) {
    observed["report"] = "missing";
    return observed;
  }
  const nlohmann::json& device = reported.report["devices"][0];
  for (const char* key : {"driver_allocs", "driver_frees", "bytes_reserved", "context_syncs", "contexts_created"})
    observed[std::string("report.") + key] = device[key].dump();
  for (const char* key : {"async_allocs", "async_frees"})
    observed[std::string("report.pool.") + key] = device["pool"][key].dump();
  observed["report.faults_injected"] = reported.report["faults_injected"].dump();
  return observed;
}

// What exit_child_observed() gives when every call succeeded: in each phase (main, then a
// thread_local object's destructor, a static object's destructor and an atexit handler) the same
// calls, all counted by the report, which the driver writes as it is unloaded, after all of them;
// the driver API build also starts the driver in main and checks in each phase that main's
// context is still current.
inline Observations exit_child_success(bool driver_api) {
  Observations per_phase = {{"malloc", "0"}, {"copy_in", "0"}, {"copy_out", "0"}, {"readback", "ok"},
                            {"free", "0"}, {"malloc_async", "0"}, {"free_async", "0"}, {"synchronize", "0"}};
  Observations expected = {
      {"exit_code", "0"},
      {"report.driver_allocs", "4"},      {"report.driver_frees", "4"},     {"report.bytes_reserved", "0"},
      {"report.context_syncs", "8"},  // each phase: a free and a synchronisation
      {"report.contexts_created", "1"},   {"report.pool.async_allocs", "4"}, {"report.pool.async_frees", "4"},
      {"report.faults_injected", "0"},
  };
  if (driver_api) {
    per_phase.insert({{"get_current", "0"}, {"current", "primary"}});
    expected.insert({{"main.init", "0"}, {"main.retain", "0"}, {"main.set_current", "0"}});
  }
  for (const char* phase : {"main", "thread_local", "static", "atexit"}) {
    for (const auto& [call, value] : per_phase) expected[std::string(phase) + "." + call] = value;
  }
  return expected;
}

// exit_child_success() for a run whose fault rule ("NAME@2+") makes one call fail in each of the
// three phases after main: `statuses` gives what the calls answer there (call -> status).
inline Observations exit_child_failing_after_main(bool driver_api, const Observations& statuses) {
  Observations expected = exit_child_success(driver_api);
  for (const char* phase : {"thread_local", "static", "atexit"}) {
    for (const auto& [call, status] : statuses) expected[std::string(phase) + "." + call] = status;
  }
  expected["report.faults_injected"] = "3";
  return expected;
}

}  // namespace runtime_test
