// The frameworks' own allocators under gpumem (docs/frameworks.md): one allocator does the work.
//
// JAX, TensorFlow, PyTorch and CuPy each size an allocator of their own from cuMemGetInfo, which
// gpumem answers with its limit, and read the very variables gpumem reads: under gpumem the two would
// stack (a fraction applied twice, memory freed into the framework's pool that gpumem can neither
// lend nor take back). So libgpumem.so, when it is loaded, sets each framework's switch to allocate
// on demand (framework_switches.def), keeping the user's own value of each variable it replaces in
// GPUMEM_SAVED_<NAME> and listing what it set in GPUMEM_FRAMEWORKS_SET. The policy reads the
// environment through user_environment(): each variable as the user gave it, so the user's fraction,
// preallocation and limit apply once, in gpumem's arena, whatever names they were given in.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/value_parsers.h"

namespace gpumem {

// Whether the preloaded library sets the switches (a boolean, default on; docs/frameworks.md).
inline constexpr std::string_view kFrameworksVariable = "GPUMEM_FRAMEWORKS";
// What it set, as "NAME=VALUE,NAME=VALUE": written once, by the first process of a tree to load it
// (its children inherit the switched environment and leave it as it is).
inline constexpr std::string_view kFrameworksSetVariable = "GPUMEM_FRAMEWORKS_SET";
// GPUMEM_SAVED_<NAME>: the user's value of NAME before it was switched (absent: NAME was unset).
inline constexpr std::string_view kSavedPrefix = "GPUMEM_SAVED_";

// One row of framework_switches.def.
struct FrameworkSwitch {
  std::string_view framework;
  std::string_view variable;
  std::string_view value;
  bool only_if_set = false;  // replaces a value the user set, never sets one the user did not
};

std::span<const FrameworkSwitch> framework_switches();

// The environment as the user gave it, read through the switches GPUMEM_FRAMEWORKS_SET lists.
struct UserEnvironment {
  // A switched variable that still holds gpumem's value reads as GPUMEM_SAVED_<NAME> (unset when that
  // is); one the program changed since reads as it is now, as the framework will read it. Every other
  // variable reads as it is. Valid as long as `raw` and the values it returns are.
  std::function<std::optional<std::string_view>(std::string_view)> lookup;
  // "NAME=VALUE" of each switch in force, for the policy's description.
  std::vector<std::string> switched;
  // One line for each switched variable the program changed since (its framework's allocator then
  // runs on top of gpumem's), for the shim to print at warn level.
  std::vector<std::string> warnings;
  // GPUMEM_FRAMEWORKS_SET itself when malformed: every variable then reads as it is.
  std::vector<VariableProblem> problems;
};

UserEnvironment user_environment(const std::function<std::optional<std::string_view>(std::string_view)>& raw);

}  // namespace gpumem
