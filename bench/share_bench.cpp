// What a GPU's ledger costs (docs/sharing.md), in one process of a ledger in a temporary directory:
//   reserve_give_back/<members>  one reserve and its give-back, as one growth step of a VMM arena
//                                (one 2 MiB granule mapped, later unmapped) does, with <members> - 1
//                                other processes in the ledger (forked children that joined and sleep)
//   reclaim_poll                 what every allocation and free of a shared device adds: one load of
//                                the mapped word others write a request to give back into
//   own_identity                 what a join spends reading who the process is (namespaces, NSpid,
//                                host name, POD_NAME, cgroup, command line: share/member_identity.h)
// No CUDA: the share layer alone (shim/share/).
#include <benchmark/benchmark.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "share/ledger.h"
#include "share/member_identity.h"

namespace {

using gpumem::shim::share::JoinRequest;
using gpumem::shim::share::Member;
using gpumem::shim::share::Outcome;

constexpr std::uint64_t kGranule = std::uint64_t{2} << 20;
// Members are never freed (as in the shim): kept reachable.
std::vector<Member*>* const g_kept = new std::vector<Member*>();

JoinRequest request_in(const std::string& dir) {
  JoinRequest request;
  std::memcpy(request.uuid, "share-bench-gpu", 16);
  request.device_total = std::uint64_t{80} << 30;
  request.dir = dir;
  return request;
}

// A ledger with `others` other members: forked children that join and wait to be killed.
class Ledger {
 public:
  explicit Ledger(int others) {
    char name[] = "/tmp/gpumem-share-bench-XXXXXX";
    dir_ = mkdtemp(name) != nullptr ? name : "";
    for (int i = 0; i < others; ++i) {
      int ready[2];
      if (pipe(ready) != 0) break;
      const pid_t pid = fork();
      if (pid == 0) {
        std::string error;
        const char ok = Member::join(request_in(dir_), error) != nullptr ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        pause();
        _exit(0);
      }
      char ok = 0;
      if (read(ready[0], &ok, 1) == 1 && ok == 'y') children_.push_back(pid);
      close(ready[0]);
      close(ready[1]);
    }
    std::string error;
    member_ = Member::join(request_in(dir_), error);
    if (member_ != nullptr) g_kept->push_back(member_);
  }
  ~Ledger() {
    for (const pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    std::string command = "rm -rf '" + dir_ + "'";
    if (!dir_.empty() && system(command.c_str()) != 0) {
    }
  }
  Member* member() const { return member_; }

 private:
  std::string dir_;
  std::vector<pid_t> children_;
  Member* member_ = nullptr;
};

void reserve_give_back(benchmark::State& state) {
  const Ledger ledger(static_cast<int>(state.range(0)) - 1);
  Member* member = ledger.member();
  if (member == nullptr) {
    state.SkipWithError("could not join the ledger");
    return;
  }
  for (auto _ : state) {
    if (member->reserve(kGranule, std::nullopt).outcome != Outcome::reserved) {
      state.SkipWithError("refused");
      break;
    }
    member->give_back(kGranule);
  }
  state.counters["members"] = static_cast<double>(member->figures().members_at_join);
}

void reclaim_poll(benchmark::State& state) {
  const Ledger ledger(0);
  Member* member = ledger.member();
  if (member == nullptr) {
    state.SkipWithError("could not join the ledger");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(member->reclaim_requested());
}

void own_identity(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(gpumem::shim::share::read_own_identity());
}

}  // namespace

BENCHMARK(reserve_give_back)->Arg(1)->Arg(8)->Arg(64)->Arg(256);
BENCHMARK(reclaim_poll);
BENCHMARK(own_identity);
BENCHMARK_MAIN();
