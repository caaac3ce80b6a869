#include "tests/common/temp_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

namespace pact::test {

TempFile::TempFile(const std::string& content) {
  char path[] = "/tmp/pact-test-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return;
  }
  path_ = path;
  if (write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    ADD_FAILURE() << "cannot write " << path_;
  close(fd);
}

TempFile::~TempFile() {
  if (!path_.empty()) unlink(path_.c_str());
}

}  // namespace pact::test
