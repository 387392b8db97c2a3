// The shim's own background threads (the IPC descriptor service, the reclaim threads): each is named
// with kBackgroundThreadPrefix and ends once the program's own threads have all ended, so that a
// program whose main thread calls pthread_exit ends as it would without gpumem.
#pragma once

namespace gpumem::shim {

// The name prefix of every thread the shim starts (pthread_setname_np).
inline constexpr char kBackgroundThreadPrefix[] = "gpumem-";

// Whether every thread of this process other than the caller has ended (a zombie main thread
// included) or is one of the shim's background threads. The main thread always counts as the
// program's while it lives, whatever its name. False when /proc cannot be read.
bool only_background_threads_left() noexcept;

}  // namespace gpumem::shim
