// Locking a process-wide mutex so that fork() cannot leave it held in the child.
//
// The first lock registers pthread_atfork handlers that take the mutex before fork and release it
// in both parent and child: a child never inherits it locked by a thread that does not exist there.
// Only for mutexes that are never held while another of these is taken (no lock-order cycles).
#pragma once

#include <pthread.h>

#include <mutex>

namespace gpumem::shim {

template <std::mutex& process_mutex>
std::unique_lock<std::mutex> lock_fork_safely() {
  static std::once_flag handlers_once;
  std::call_once(handlers_once, [] {
    pthread_atfork([] { process_mutex.lock(); }, [] { process_mutex.unlock(); },
                   [] { process_mutex.unlock(); });
  });
  return std::unique_lock<std::mutex>(process_mutex);
}

}  // namespace gpumem::shim
