// Network namespace entry shared by pact-perf and the netns suite; see netns.h.
#include "netns.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pact::netns {
namespace {

std::string failed(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

std::string enterNamespace(const std::string& ns, const std::string& expectLink) {
  if (ns.empty() || ns.find('/') != std::string::npos) {
    return "bad network namespace name '" + ns + "'";
  }
  const std::string path = "/var/run/netns/" + ns;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failed("open " + path);
  int rc = ::setns(fd, CLONE_NEWNET);
  int err = errno;
  ::close(fd);
  if (rc != 0) {
    errno = err;
    return failed("setns(" + path + ", CLONE_NEWNET)");
  }
  if (::unshare(CLONE_NEWNS) != 0) return failed("unshare(CLONE_NEWNS)");
  if (::mount("none", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0) {
    return failed("make / a recursive slave");
  }
  if (::umount2("/sys", MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    return failed("umount /sys");
  }
  if (::mount(ns.c_str(), "/sys", "sysfs", 0, nullptr) != 0) return failed("mount sysfs on /sys");
  if (!expectLink.empty()) {
    struct stat st{};
    const std::string link = "/sys/class/net/" + expectLink;
    if (::stat(link.c_str(), &st) != 0) {
      return failed(link + " is not visible after entering " + ns);
    }
  }
  return {};
}

}  // namespace pact::netns
