#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace pact::log {

int g_level = static_cast<int>(Level::kWarn);
namespace {
std::atomic<Sink> g_sink{nullptr};

void stderrSink(Level level, const char* file, int line, const char* message) {
  const char* base = std::strrchr(file, '/');
  std::fprintf(stderr, "pact %d %s %s:%d %s\n", static_cast<int>(getpid()), levelName(level),
               base ? base + 1 : file, line, message);
}
}  // namespace

void setLevel(Level l) { g_level = static_cast<int>(l); }
Level level() { return static_cast<Level>(g_level); }
void setSink(Sink sink) { g_sink.store(sink); }

const char* levelName(Level l) {
  switch (l) {
    case Level::kNone: return "none";
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
    case Level::kTrace: return "trace";
  }
  return "?";
}

void write(Level l, const char* file, int line, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  Sink sink = g_sink.load();
  (sink ? sink : stderrSink)(l, file, line, buf);
}

}  // namespace pact::log
