#include "tests/common/scoped_env.h"

#include <cstdlib>

namespace pact::test {

ScopedEnv& ScopedEnv::set(const std::string& name, std::optional<std::string> value) {
  const char* old = std::getenv(name.c_str());
  saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
  if (value) {
    ::setenv(name.c_str(), value->c_str(), 1);
  } else {
    ::unsetenv(name.c_str());
  }
  return *this;
}

ScopedEnv::~ScopedEnv() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->old) {
      ::setenv(it->name.c_str(), it->old->c_str(), 1);
    } else {
      ::unsetenv(it->name.c_str());
    }
  }
}

}  // namespace pact::test
