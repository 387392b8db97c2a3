// HugePageAllocator: a std::allocator for the arena's large host tables (the chunk records), which
// asks the kernel to back arrays of 2 MiB or more with transparent huge pages.
//
// A free or a split reads one record at random; in an arena of 100k chunks the records span over a
// thousand 4 KiB pages, more than the TLB covers, so each such read would also walk the page table.
// On 2 MiB pages the same records take three TLB entries. Where the kernel has no huge pages to give
// (THP off, or memory fragmented), the memory is ordinary pages and nothing else changes. Arrays
// under 2 MiB come from operator new: they would waste most of a huge page.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace gpumem::detail {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Huge-page-aligned memory for `bytes` (a multiple of kHugePageBytes), or nullptr.
inline void* map_huge_page_aligned(std::size_t bytes) noexcept {
  // Over-map by one huge page, then trim both ends so the mapping starts on a huge-page boundary.
  const std::size_t mapped = bytes + kHugePageBytes;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + mapped;
  if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
  void* memory = reinterpret_cast<void*>(aligned);
  madvise(memory, bytes, MADV_HUGEPAGE);  // a hint: refused, the table works on small pages
  return memory;
}

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;

  HugePageAllocator() noexcept = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(std::size_t count) {
    if (count > (SIZE_MAX - kHugePageBytes) / sizeof(T)) throw std::bad_alloc();
    const std::size_t bytes = count * sizeof(T);
    if (bytes < kHugePageBytes) return static_cast<T*>(::operator new(bytes, std::align_val_t{alignof(T)}));
    void* memory = map_huge_page_aligned(rounded(bytes));
    if (memory == nullptr) throw std::bad_alloc();
    return static_cast<T*>(memory);
  }
  void deallocate(T* pointer, std::size_t count) noexcept {
    const std::size_t bytes = count * sizeof(T);
    if (bytes < kHugePageBytes) {
      ::operator delete(pointer, std::align_val_t{alignof(T)});
    } else {
      munmap(pointer, rounded(bytes));
    }
  }

  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) noexcept { return true; }

 private:
  static std::size_t rounded(std::size_t bytes) noexcept {
    return (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  }
};

// A vector whose storage is on huge pages once it reaches kHugePageBytes.
template <typename T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace gpumem::detail
