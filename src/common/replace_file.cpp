#include "common/replace_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pact {

std::string expandFileName(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%' || i + 1 == path.size()) {
      out += path[i];
      continue;
    }
    const char c = path[++i];
    if (c == 'p') {
      out += std::to_string(::getpid());
    } else if (c == 'h') {
      char host[256] = "";
      (void)::gethostname(host, sizeof host - 1);
      out += host;
    } else if (c == '%') {
      out += '%';
    } else {
      out += '%';
      out += c;
    }
  }
  return out;
}

bool replaceFile(const std::string& pattern, FunctionRef<bool(std::FILE*)> write, std::string* error) {
  const std::string path = expandFileName(pattern);
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
