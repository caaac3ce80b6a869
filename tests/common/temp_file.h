// TempFile: a file under /tmp with the given content (e.g. a PACT_AUTH_KEY_FILE), removed on
// destruction. Move-only. Fails the current test (ADD_FAILURE) when it cannot be written.
#pragma once

#include <string>

namespace pact::test {

class TempFile {
 public:
  explicit TempFile(const std::string& content);
  ~TempFile();
  TempFile(TempFile&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempFile& operator=(TempFile&&) = delete;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace pact::test
