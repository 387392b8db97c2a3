// Clang thread-safety annotations and the annotated mutex the arena locks. On compilers without the
// analysis (gcc) the macros expand to nothing and Mutex is a plain std::mutex.
#pragma once

#include <mutex>

#if defined(__clang__)
#define GPUMEM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GPUMEM_THREAD_ANNOTATION(x)
#endif

#define GPUMEM_CAPABILITY(name) GPUMEM_THREAD_ANNOTATION(capability(name))
#define GPUMEM_SCOPED_CAPABILITY GPUMEM_THREAD_ANNOTATION(scoped_lockable)
#define GPUMEM_GUARDED_BY(mutex) GPUMEM_THREAD_ANNOTATION(guarded_by(mutex))
#define GPUMEM_REQUIRES(...) GPUMEM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define GPUMEM_ACQUIRE(...) GPUMEM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define GPUMEM_RELEASE(...) GPUMEM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define GPUMEM_TRY_ACQUIRE(...) GPUMEM_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define GPUMEM_EXCLUDES(...) GPUMEM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

namespace gpumem {

// A std::mutex the analysis knows as a capability.
class GPUMEM_CAPABILITY("mutex") Mutex {
 public:
  void lock() GPUMEM_ACQUIRE() { mutex_.lock(); }
  void unlock() GPUMEM_RELEASE() { mutex_.unlock(); }
  bool try_lock() GPUMEM_TRY_ACQUIRE(true) { return mutex_.try_lock(); }

 private:
  std::mutex mutex_;
};

// Holds a Mutex for the lifetime of the scope.
class GPUMEM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) GPUMEM_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~MutexLock() GPUMEM_RELEASE() { mutex_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mutex_;
};

}  // namespace gpumem
