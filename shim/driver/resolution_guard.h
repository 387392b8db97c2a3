// Marks the calling thread as being inside the shim's own symbol resolution.
//
// While set, the dlsym and cuGetProcAddress hooks answer with the real lookup unchanged and the
// lazy tables are not re-entered, so a profiler or the logger that calls dlsym while we resolve
// cannot recurse into us or wait on a lock this thread already holds.
#pragma once

namespace gpumem::shim {

// Initial-exec TLS: reading it never allocates, even on a thread's first access.
inline thread_local bool t_resolving __attribute__((tls_model("initial-exec"))) = false;

class ResolutionGuard {
 public:
  ResolutionGuard() noexcept : outer_(t_resolving) { t_resolving = true; }
  ~ResolutionGuard() { t_resolving = outer_; }
  ResolutionGuard(const ResolutionGuard&) = delete;
  ResolutionGuard& operator=(const ResolutionGuard&) = delete;

  static bool active() noexcept { return t_resolving; }

 private:
  bool outer_;
};

}  // namespace gpumem::shim
