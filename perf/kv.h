// `pact-perf kv`: the KV-cache deployment of the background article, section 9, on loopback in
// one process: prefill workers send each request's KV blocks through the transfer engine to the
// decode worker a router picks; decode workers expect them into free pages of a fixed page pool,
// verify and commit the block table in the commit hook, and free the pages after a decode time.
// Options and the model: `pact-perf kv --help` and the comment at the top of kv.cpp.
#pragma once

namespace CLI {
class App;
}

namespace pact::perf {

// Adds the `kv` subcommand; when it runs, *exit_code gets the process exit status.
void addKvCommand(CLI::App& app, int* exit_code);

}  // namespace pact::perf
