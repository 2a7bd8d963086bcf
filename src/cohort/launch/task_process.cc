#include "cohort/launch/task_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"

namespace cohort::launch {

absl::StatusOr<std::unique_ptr<TaskProcess>> TaskProcess::Start(
    Env* env, Options options) {
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Spawn(options.command, options.env);
  if (!process.ok()) {
    return Annotate(process.status(),
                    absl::StrCat("starting ", options.spec.Name()));
  }
  return std::unique_ptr<TaskProcess>(
      new TaskProcess(env, std::move(options), std::move(process).value()));
}

TaskProcess::TaskProcess(Env* env, Options options,
                         std::unique_ptr<Subprocess> process)
    : env_(env),
      options_(std::move(options)),
      process_(std::move(process)),
      started_(env->Now()) {
  reader_ = std::thread([this] { ReadOutput(); });
  waiter_ = std::thread([this] {
    ExitInfo exit = process_->Wait();
    if (options_.on_exit) options_.on_exit(exit, env_->Now());
  });
}

TaskProcess::~TaskProcess() { Finish(env_->Now() + absl::Seconds(2)); }

std::vector<std::string> TaskProcess::Tail() {
  absl::MutexLock lock(&mu_);
  return {tail_.begin(), tail_.end()};
}

void TaskProcess::Finish(absl::Time drain_until) {
  if (finished_) return;
  finished_ = true;
  // The leader may have exited already; descendants left in its group go.
  process_->SignalGroup(SIGKILL);
  waiter_.join();
  abandon_at_.store(absl::ToUnixNanos(drain_until));
  reader_.join();
}

void TaskProcess::ReadOutput() {
  // Never through a link someone planted in a shared log directory.
  const int log_fd =
      open(options_.log_path.c_str(),
           O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  FILE* log = log_fd < 0 ? nullptr : fdopen(log_fd, "a");
  if (log == nullptr && log_fd >= 0) close(log_fd);
  if (log == nullptr && options_.messages) {
    options_.messages(absl::StrCat("cannot open ", options_.log_path, ": ",
                                   strerror(errno), "; ", options_.spec.Name(),
                                   "'s output goes only to the console"));
  }
  const std::string prefix = absl::StrCat("[", options_.spec.Name(), "] ");
  const int fd = process_->output_fd();
  std::string pending;
  char buf[4096];
  auto emit = [&](std::string line) {
    if (log != nullptr) {
      fwrite(line.data(), 1, line.size(), log);
      fputc('\n', log);
      fflush(log);
    }
    if (options_.output) options_.output(prefix + line);
    absl::MutexLock lock(&mu_);
    tail_.push_back(std::move(line));
    while (static_cast<int>(tail_.size()) > std::max(1, options_.tail_lines)) {
      tail_.pop_front();
    }
  };
  while (true) {
    pollfd pfd{fd, POLLIN, 0};
    const int n = poll(&pfd, 1, 200);
    if (n == 0) {
      // Descendants that left the process group can keep the pipe open;
      // stop reading once the owner gave up on it.
      if (absl::ToUnixNanos(env_->Now()) > abandon_at_.load()) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const ssize_t got = read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    pending.append(buf, static_cast<size_t>(got));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      emit(pending.substr(start, nl - start));
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) emit(std::move(pending));
  if (log != nullptr) fclose(log);
}

}  // namespace cohort::launch
