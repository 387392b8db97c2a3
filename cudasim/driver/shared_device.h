// CUDASIM_SHARED_DEVICES: one simulated device's memory shared by every process of the machine that
// uses it, through a file per device (keyed by the device's UUID) that each process maps: a slot per
// process with what it has taken. A process's slot is alive while it holds an OFD lock on the slot's
// byte; the kernel drops the lock however the process ends, and the next look finds the slot dead
// and drops its memory, as a real driver frees a dead process's memory.
#pragma once

#include <cstdint>
#include <string>

namespace cudasim {

struct SharedDevice;

// The directory CUDASIM_SHARED_DEVICES=1 means: /dev/shm/cudasim-<uid> (/tmp/... without /dev/shm).
std::string default_shared_devices_dir();

// Attaches simulated device `physical` (its number before CUDA_VISIBLE_DEVICES) of `total` bytes
// to its file in `dir` (made 0700 if missing). Null, after
// one line on stderr, when it cannot be (the file is another size's with processes attached, ...).
SharedDevice* attach_shared_device(const std::string& dir, int physical, std::uint64_t total);

// Each takes the file's lock for a few microseconds; callers hold State::mu (one call per process at
// a time). shared_take: false when every process's memory and `bytes` would pass the device's total.
bool shared_take(SharedDevice& device, std::uint64_t bytes);
void shared_give(SharedDevice& device, std::uint64_t bytes);
// The memory every live process has taken (the dead are dropped first).
std::uint64_t shared_used(SharedDevice& device);

// In a forked child: the parent's slots are not the child's (its descriptors are closed without
// releasing the parent's locks); a fresh driver attaches again at cuInit.
void drop_shared_devices_in_child();

}  // namespace cudasim
