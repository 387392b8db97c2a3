// The frameworks' switches and the user's view of the environment through them.
#include "policy/framework_switches.h"

#include <array>
#include <memory>
#include <utility>

#include <fmt/format.h>

namespace gpumem {

namespace {

constexpr bool kSwitchWhenALWAYS = false;
constexpr bool kSwitchWhenIF_SET = true;
#define GPUMEM_FRAMEWORK_SWITCH(framework, variable, value, when) \
  FrameworkSwitch{framework, #variable, value, kSwitchWhen##when},
constexpr std::array kSwitches{
#include "policy/framework_switches.def"
};

const FrameworkSwitch* switch_named(std::string_view variable) {
  for (const FrameworkSwitch& entry : kSwitches) {
    if (entry.variable == variable) return &entry;
  }
  return nullptr;
}

// One entry of GPUMEM_FRAMEWORKS_SET.
struct SetEntry {
  const FrameworkSwitch* which = nullptr;
  std::string_view value;
};

// The entries of GPUMEM_FRAMEWORKS_SET, or nullopt when any is not NAME=VALUE of a known switch (or
// names one twice): the whole list is then distrusted.
std::optional<std::vector<SetEntry>> parse_set_list(std::string_view text) {
  std::vector<SetEntry> entries;
  if (text.empty()) return entries;  // nothing could be set
  for (bool last = false; !last;) {
    const std::size_t comma = text.find(',');
    const std::string_view entry = text.substr(0, comma);
    last = comma == std::string_view::npos;
    if (!last) text.remove_prefix(comma + 1);
    const std::size_t equals = entry.find('=');
    if (equals == std::string_view::npos) return std::nullopt;
    const FrameworkSwitch* which = switch_named(entry.substr(0, equals));
    if (which == nullptr) return std::nullopt;
    for (const SetEntry& seen : entries) {
      if (seen.which == which) return std::nullopt;
    }
    entries.push_back(SetEntry{which, entry.substr(equals + 1)});
  }
  return entries;
}

// A switched variable and how it reads for the user.
struct Override {
  std::string_view variable;
  std::optional<std::string_view> value;
};

}  // namespace

std::span<const FrameworkSwitch> framework_switches() { return kSwitches; }

UserEnvironment user_environment(const std::function<std::optional<std::string_view>(std::string_view)>& raw) {
  UserEnvironment result;
  auto overrides = std::make_shared<std::vector<Override>>();
  const std::optional<std::string_view> set_text = raw(kFrameworksSetVariable);
  if (set_text) {
    if (const std::optional<std::vector<SetEntry>> entries = parse_set_list(*set_text)) {
      for (const SetEntry& entry : *entries) {
        const std::optional<std::string_view> now = raw(entry.which->variable);
        if (now && *now == entry.value) {
          overrides->push_back(Override{entry.which->variable, raw(std::string(kSavedPrefix) + std::string(entry.which->variable))});
          result.switched.push_back(fmt::format("{}={}", entry.which->variable, entry.value));
          continue;
        }
        // Changed since it was switched: what the framework reads now is the user's.
        result.warnings.push_back(fmt::format(
            "gpumem: {} is {}, not {} as libgpumem.so set it when the process started ({}): {}'s own "
            "allocator then runs on top of gpumem's and keeps what it frees (docs/frameworks.md)",
            entry.which->variable, now ? quote_value(*now) : std::string("unset"), quote_value(entry.value),
            kFrameworksSetVariable, entry.which->framework));
      }
    } else {
      result.problems.push_back(invalid_variable(
          kFrameworksSetVariable, *set_text,
          "not a list of NAME=VALUE naming the frameworks' switches (libgpumem.so writes it when it is loaded)",
          "the frameworks' variables are read as they are"));
    }
  }
  result.lookup = [raw, overrides](std::string_view name) -> std::optional<std::string_view> {
    for (const Override& entry : *overrides) {
      if (entry.variable == name) return entry.value;
    }
    return raw(name);
  };
  return result;
}

}  // namespace gpumem
