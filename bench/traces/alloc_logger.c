// alloc_logger: an LD_PRELOAD library that records a process's posix_memalign/free pairs as an
// allocation trace in RMM's replay-log CSV (the columns gpumem's GPUMEM_TRACE writes), so that a CPU
// run of a framework whose tensor allocator uses posix_memalign (PyTorch's CPU allocator asks for
// 64-byte alignment) can be replayed by gpumem-replay.
//
//   ALLOC_LOG_FILE   where to write the trace (required; the library records nothing without it)
//   ALLOC_LOG_ALIGN  only calls with this alignment are recorded (default 64); 0 records every call
//
// Only frees of pointers that a recorded posix_memalign returned are written. Rows are buffered and
// written with write(2) under one lock; the buffer is flushed when full and at exit. The library
// never calls malloc itself: the table of live pointers is an mmap'd open-addressing hash set.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*posix_memalign_fn)(void**, size_t, size_t);
typedef void (*free_fn)(void*);

static posix_memalign_fn real_posix_memalign;
static free_fn real_free;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;          // -1: not opened yet; -2: disabled
static size_t wanted_alignment = 64;

// Live recorded pointers: linear probing over 2^24 slots (enough for 12M live blocks); 0 is an empty
// slot. Erasing shifts later entries of the run back (no tombstones), so a lookup of a pointer that
// was never recorded, which every other free is, stops at the first empty slot.
#define TABLE_BITS 24
#define TABLE_SLOTS ((size_t)1 << TABLE_BITS)
static uintptr_t* live;
static size_t* live_sizes;  // parallel to live: the size each recorded block asked for

static char buffer[1 << 20];
static size_t buffered;

static size_t slot_of(uintptr_t p) { return (size_t)((p >> 4) * 0x9e3779b97f4a7c15ull >> (64 - TABLE_BITS)); }

static int live_insert(uintptr_t p, size_t size) {
  size_t i = slot_of(p);
  for (size_t n = 0; n < TABLE_SLOTS; ++n, i = (i + 1) & (TABLE_SLOTS - 1)) {
    if (live[i] == 0 || live[i] == p) {
      live[i] = p;
      live_sizes[i] = size;
      return 1;
    }
  }
  return 0;
}

// The recorded size of `p`, removed from the set; -1 when `p` was not recorded.
static long long live_erase(uintptr_t p) {
  size_t i = slot_of(p);
  while (live[i] != p) {
    if (live[i] == 0) return -1;
    i = (i + 1) & (TABLE_SLOTS - 1);
  }
  const long long size = (long long)live_sizes[i];
  // Backward shift: move each later entry of the run into the hole unless its home slot lies
  // cyclically in (hole, entry].
  size_t hole = i;
  for (size_t j = (i + 1) & (TABLE_SLOTS - 1); live[j] != 0; j = (j + 1) & (TABLE_SLOTS - 1)) {
    const size_t home = slot_of(live[j]);
    const int stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    live[hole] = live[j];
    live_sizes[hole] = live_sizes[j];
    hole = j;
  }
  live[hole] = 0;
  return size;
}

static void flush_locked(void) {
  size_t done = 0;
  while (done < buffered) {
    const ssize_t n = write(log_fd, buffer + done, buffered - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += (size_t)n;
  }
  buffered = 0;
}

static void put_decimal(uint64_t value, int min_digits) {
  char digits[24];
  int count = 0;
  do {
    digits[count++] = (char)('0' + value % 10);
    value /= 10;
  } while (value != 0 || count < min_digits);
  while (count > 0) buffer[buffered++] = digits[--count];
}

static void put_text(const char* text) {
  const size_t n = strlen(text);
  memcpy(buffer + buffered, text, n);
  buffered += n;
}

static void put_hex(uint64_t value) {
  char digits[20];
  int count = 0;
  put_text("0x");
  do {
    digits[count++] = "0123456789abcdef"[value & 0xf];
    value >>= 4;
  } while (value != 0);
  while (count > 0) buffer[buffered++] = digits[--count];
}

// One row: Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit (Reserved and Limit empty).
static void record_locked(const char* action, uintptr_t pointer, size_t size) {
  if (buffered + 256 > sizeof buffer) flush_locked();
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  put_decimal((uint64_t)syscall(SYS_gettid), 1);
  put_text(",");
  put_decimal((uint64_t)now.tv_sec, 1);
  put_text(".");
  put_decimal((uint64_t)now.tv_nsec / 1000u, 6);
  put_text(",");
  put_text(action);
  put_text(",");
  put_hex(pointer);
  put_text(",");
  put_decimal(size, 1);
  put_text(",0,0,,\n");
}

// Opens the log on first use; false when recording is off.
static int ready_locked(void) {
  if (log_fd >= 0) return 1;
  if (log_fd == -2) return 0;
  log_fd = -2;
  const char* path = getenv("ALLOC_LOG_FILE");
  if (path == NULL || path[0] == '\0') return 0;
  const char* alignment = getenv("ALLOC_LOG_ALIGN");
  if (alignment != NULL && alignment[0] != '\0') wanted_alignment = (size_t)strtoull(alignment, NULL, 10);
  void* table = mmap(NULL, TABLE_SLOTS * (sizeof(uintptr_t) + sizeof(size_t)), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (table == MAP_FAILED) return 0;
  live_sizes = (size_t*)((uintptr_t*)table + TABLE_SLOTS);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return 0;
  live = (uintptr_t*)table;
  log_fd = fd;
  put_text("Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit\n");
  return 1;
}

static void resolve(void) {
  if (real_posix_memalign == NULL) real_posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
  if (real_free == NULL) real_free = (free_fn)dlsym(RTLD_NEXT, "free");
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  resolve();
  const int result = real_posix_memalign(out, alignment, size);
  if (result != 0 || (wanted_alignment != 0 && alignment != wanted_alignment)) return result;
  pthread_mutex_lock(&lock);
  if (ready_locked() && live_insert((uintptr_t)*out, size)) record_locked("allocate", (uintptr_t)*out, size);
  pthread_mutex_unlock(&lock);
  return result;
}

void free(void* pointer) {
  resolve();
  if (pointer != NULL && live != NULL) {
    pthread_mutex_lock(&lock);
    const long long size = log_fd >= 0 ? live_erase((uintptr_t)pointer) : -1;
    if (size >= 0) record_locked("free", (uintptr_t)pointer, (size_t)size);
    pthread_mutex_unlock(&lock);
  }
  real_free(pointer);
}

__attribute__((destructor)) static void finish(void) {
  pthread_mutex_lock(&lock);
  if (log_fd >= 0) {
    flush_locked();
    close(log_fd);
    log_fd = -2;
  }
  pthread_mutex_unlock(&lock);
}
