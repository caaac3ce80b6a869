// ScopedEnv: sets (or unsets) environment variables for a scope and restores the previous values
// on destruction, in reverse order. Not thread-safe (setenv never is): use it before starting
// threads, typically at the top of a forked child's body, before the plugin is opened.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pact::test {

class ScopedEnv {
 public:
  ScopedEnv() = default;
  // Convenience: one variable. value == nullopt unsets it.
  ScopedEnv(const std::string& name, std::optional<std::string> value) {
    set(name, std::move(value));
  }
  // Several: each name set to its value.
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const auto& [name, value] : vars) set(name, value);
  }
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  ScopedEnv& set(const std::string& name, std::optional<std::string> value);

 private:
  struct Saved {
    std::string name;
    std::optional<std::string> old;
  };
  std::vector<Saved> saved_;
};

}  // namespace pact::test
