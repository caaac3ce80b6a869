#include "common/replace_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pact {

bool replaceFile(const std::string& path, FunctionRef<bool(std::FILE*)> write, std::string* error) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr && write(f);
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return true;
  *error = path + ": " + std::strerror(errno);
  (void)std::remove(tmp.c_str());
  return false;
}

}  // namespace pact
