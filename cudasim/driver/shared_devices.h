// Devices shared by processes (CUDASIM_SHARED_DEVICES=FILE, opt-in): every process that names the same
// FILE sees one memory per device ordinal, as processes on one machine share its GPUs. Each process
// publishes what it has committed on each device in its own slot of FILE; a device allocation fits
// only beside what the other live processes committed; cuMemGetInfo's free and NVML's used count them.
//
// The check and the publication are one step under an exclusive flock(2) on FILE, which the kernel
// drops with a process however it dies; a slot whose process is gone counts for nothing and is
// taken by the next process that needs one. Without the variable nothing here does anything.
// Every function needs State::mu held (the slot and the file are the process's).
#pragma once

#include <cstdint>
#include <string>

namespace cudasim::shared_devices {

// Opens (creating) FILE for this process; false, with one line on stderr naming the variable, when
// it cannot be opened or is not a cudasim shared-device file. An empty path: no sharing.
bool configure(const std::string& path);

// Whether `bytes` more fit on device `device` of `total` bytes beside what this process committed
// (`committed`, before the new bytes) and what every other live process committed there; when they
// fit, this process's figure becomes committed + bytes. Always true when nothing is shared and the
// process's own figures fit (the caller checks those).
bool reserve(int device, std::uint64_t total, std::uint64_t committed, std::uint64_t bytes);

// This process now holds `committed` bytes of device `device` (after a release).
void publish(int device, std::uint64_t committed);

// What the other live processes sharing FILE committed on `device`; 0 without sharing.
std::uint64_t others(int device);

}  // namespace cudasim::shared_devices
