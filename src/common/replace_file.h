// Replaces a file whole, so a reader never sees half of it: write() fills PATH.tmp.PID, which is
// then renamed over PATH. The metrics file and the trace file are written this way.
#pragma once

#include <cstdio>
#include <string>

#include "common/function_ref.h"

namespace pact {

// false and *error ("PATH: why") when the file cannot be written or write() returns false; the
// temporary file is removed then.
bool replaceFile(const std::string& path, FunctionRef<bool(std::FILE*)> write, std::string* error);

}  // namespace pact
