#include "bench/coord/child_clients.h"

#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "cohort/rpc/transport.h"

namespace cohort::bench {

absl::StatusOr<Child> SpawnChild(const std::vector<std::string>& args,
                                 const std::string& token) {
  std::vector<std::string> argv = {"/proc/self/exe", "bench", "coord"};
  argv.insert(argv.end(), args.begin(), args.end());
  // The job token goes through the environment (as `cohort launch` hands it
  // to tasks), not the command line.
  Subprocess::SpawnOptions options;
  options.stderr_to = Subprocess::Stderr::kInherit;  // the child's errors
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(
      argv, EnvironmentWith({absl::StrCat(rpc::kJobTokenEnvVar, "=", token)}),
      options);
  if (!process.ok()) {
    return absl::Status(process.status().code(),
                        absl::StrCat("cannot start a client process: ",
                                     process.status().message()));
  }
  Child child;
  child.process = *std::move(process);
  return child;
}

std::string ReadChildLine(Child& child, std::string& buffer) {
  char buf[4096];
  size_t newline;
  while ((newline = buffer.find('\n')) == std::string::npos) {
    const ssize_t n = read(child.process->output_fd(), buf, sizeof(buf));
    if (n <= 0) return "";
    buffer.append(buf, static_cast<size_t>(n));
  }
  std::string line = buffer.substr(0, newline);
  buffer.erase(0, newline + 1);
  return line;
}

absl::StatusOr<Json> CollectChild(Child& child, int index, std::string out) {
  out += child.process->ReadOutputToEnd();
  const ExitInfo exit = child.process->Wait();
  if (!exit.ok()) {
    return absl::InternalError(
        absl::StrCat("client process ", index, " (pid ", child.process->pid(),
                     ") ", exit.Describe(), "; its stderr says why"));
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const size_t last = out.rfind('\n');
  return ParseJson(last == std::string::npos ? out : out.substr(last + 1),
                   "client process output");
}

}  // namespace cohort::bench
