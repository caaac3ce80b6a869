// Replaces a file whole, so a reader never sees half of it: write() fills PATH.tmp.PID, which is
// then renamed over PATH. The metrics file and the trace file are written this way. In PATH, %p
// stands for the process id and %h for the host name (each process of a job its own file).
#pragma once

#include <cstdio>
#include <string>

#include "common/function_ref.h"

namespace pact {

// false and *error ("PATH: why") when the file cannot be written or write() returns false; the
// temporary file is removed then.
bool replaceFile(const std::string& path, FunctionRef<bool(std::FILE*)> write, std::string* error);

// PATH with %p and %h replaced (%% is a %).
std::string expandFileName(const std::string& path);

}  // namespace pact
