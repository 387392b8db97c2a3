// The frameworks' switches (policy/framework_switches.def, docs/frameworks.md): when libgpumem.so is
// loaded, before the program's main, JAX, TensorFlow, PyTorch and CuPy are told to allocate on demand,
// so that gpumem's arena alone preallocates, grows, shares and caps. The user's value of each variable
// replaced is kept in GPUMEM_SAVED_<NAME> (the policy reads it back: the user's fraction, preallocation
// and limit apply once, in gpumem), and GPUMEM_FRAMEWORKS_SET lists what was set. A process that
// finds GPUMEM_FRAMEWORKS_SET already there (a child: it inherits the switched environment) changes
// nothing; nor does one with GPUMEM_FRAMEWORKS off, or gpumem itself off (GPUMEM_MODE=off).
//
// Why here: the frameworks read their variables long after start-up (JAX and TensorFlow when their
// GPU backend starts, PyTorch at its first CUDA tensor, CuPy when its pool is made), and a Python
// program's os.environ is copied from the process's environment before its first line runs. Why
// safe: glibc's setenv is safe only while no other thread reads the environment; a constructor of a
// preloaded library runs on the loading thread, before main, where programs start no threads. C and
// libc only, like the rest of libgpumem.so.
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SET_VARIABLE "GPUMEM_FRAMEWORKS_SET"
#define SAVED_PREFIX "GPUMEM_SAVED_"

struct framework_switch {
  const char* variable;
  const char* value;
  int only_if_set;
};

#define SWITCH_WHEN_ALWAYS 0
#define SWITCH_WHEN_IF_SET 1
#define GPUMEM_FRAMEWORK_SWITCH(framework, variable, value, when) {#variable, value, SWITCH_WHEN_##when},
static const struct framework_switch kSwitches[] = {
#include "policy/framework_switches.def"
};
enum { kSwitchCount = sizeof kSwitches / sizeof kSwitches[0] };

// Whether `value`, blanks around it ignored, is `word` in any letter case.
static int is_word(const char* value, const char* word) {
  if (value == NULL) return 0;
  while (*value == ' ' || *value == '\t' || *value == '\n' || *value == '\r') ++value;
  size_t length = strlen(value);
  while (length > 0 && (value[length - 1] == ' ' || value[length - 1] == '\t' || value[length - 1] == '\n' ||
                        value[length - 1] == '\r')) {
    --length;
  }
  return length == strlen(word) && strncasecmp(value, word, length) == 0;
}

// The spellings of "off" a boolean variable accepts (policy/value_parsers.cpp: parse_boolean); any
// other value leaves the switches on, as the policy's error line for it says.
static int is_off(const char* value) {
  return is_word(value, "0") || is_word(value, "false") || is_word(value, "no") || is_word(value, "off");
}

__attribute__((constructor)) static void gpumem_preload_switch_frameworks(void) {
  if (getenv(SET_VARIABLE) != NULL) return;
  if (is_off(getenv("GPUMEM_FRAMEWORKS")) || is_word(getenv("GPUMEM_MODE"), "off")) return;
  char set_list[512] = "";
  size_t used = 0;
  for (int i = 0; i < kSwitchCount; ++i) {
    const struct framework_switch* entry = &kSwitches[i];
    const char* user_value = getenv(entry->variable);
    if (user_value == NULL && entry->only_if_set) continue;
    char saved[128];
    const size_t name_length = strlen(entry->variable);
    const size_t entry_length = name_length + 1 + strlen(entry->value) + 1;
    if (sizeof SAVED_PREFIX + name_length > sizeof saved || used + entry_length >= sizeof set_list) continue;
    memcpy(saved, SAVED_PREFIX, sizeof SAVED_PREFIX - 1);
    memcpy(saved + sizeof SAVED_PREFIX - 1, entry->variable, name_length + 1);
    // The user's value first: setenv copies it, before the variable itself is replaced.
    if (user_value != NULL && setenv(saved, user_value, 1) != 0) continue;
    if (setenv(entry->variable, entry->value, 1) != 0) continue;
    used += (size_t)(stpcpy(stpcpy(stpcpy(stpcpy(set_list + used, used == 0 ? "" : ","), entry->variable), "="),
                            entry->value) -
                     (set_list + used));
  }
  setenv(SET_VARIABLE, set_list, 1);
}
