// Fuzzes the kubeconfig reader of the Kubernetes resolver: the YAML-subset
// parser (ParseKubeconfigText) and LoadKubeconfig on top of it, which reads
// the file through the Env (a FakeEnv here) and picks the current context's
// cluster and user.
//
// Checked: no crash; a parse error is InvalidArgument naming the file; a
// YAML document is a mapping or a sequence and survives a JSON round trip;
// LoadKubeconfig either gives a configuration with a server or fails with
// InvalidArgument / FailedPrecondition naming the file.
//
// LoadKubeconfig writes inline *-data values to temporary files under
// $TMPDIR; the harness points TMPDIR at a private directory and empties it
// after every input.
#include <dirent.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/json.h"
#include "cohort/base/logging.h"
#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"
#include "known_bugs.h"

namespace {

constexpr char kPath[] = "/fuzz/kube/config";

// Known project bugs (fuzz/crashes-found/kubeconfig/README.md), tolerated
// unless COHORT_FUZZ_KNOWN_BUGS is set (known_bugs.h):
//  1. A user's tokenFile that cannot be read comes back as the Env's bare
//     NotFound, which names neither the kubeconfig nor the entry.
//  2. "- - - ... x" nests one sequence per "- " on a single line; the parser
//     recurses once per level and copies the rest of the line at each, so a
//     few thousand levels overflow the stack (and the copies take quadratic
//     memory). Inputs with a line of more than kMaxDashRun nested items are
//     skipped.
bool IsUnreadableTokenFile(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound &&
         absl::StartsWith(status.message(), "cannot open ");
}

constexpr int kMaxDashRun = 256;

bool HasLongDashRun(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    int run = 0;
    size_t k = line.find_first_not_of(' ');
    while (k != absl::string_view::npos && k < line.size() && line[k] == '-' &&
           (k + 1 == line.size() || line[k + 1] == ' ')) {
      if (++run > kMaxDashRun) return true;
      k = line.find_first_not_of(' ', k + 1);
    }
  }
  return false;
}

std::string& TempDir() {
  static std::string* const dir = new std::string;
  return *dir;
}

void EmptyTempDir() {
  DIR* dir = opendir(TempDir().c_str());
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    unlink(absl::StrCat(TempDir(), "/", name).c_str());
  }
  closedir(dir);
}

void RemoveTempDir() {
  EmptyTempDir();
  rmdir(TempDir().c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  char pattern[] = "/tmp/fuzz_kubeconfig.XXXXXX";
  COHORT_CHECK(mkdtemp(pattern) != nullptr) << "mkdtemp failed";
  TempDir() = pattern;
  setenv("TMPDIR", pattern, 1);
  atexit(RemoveTempDir);
  // Keeps stderr for libFuzzer's own output.
  cohort::SetMinLogLevel(cohort::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (cohort::fuzz::SkipKnownBugs() && HasLongDashRun(text)) return 0;

  auto doc = cohort::ParseKubeconfigText(text, kPath);
  if (!doc.ok()) {
    COHORT_CHECK(doc.status().code() == absl::StatusCode::kInvalidArgument)
        << doc.status();
    COHORT_CHECK(absl::StrContains(doc.status().message(), kPath))
        << doc.status();
  } else {
    COHORT_CHECK(doc->is_object() || doc->is_array()) << doc->type_name();
    // Written as JSON, the document reads back the same (when its strings
    // are UTF-8: YAML scalars may hold any bytes, JSON text may not).
    const std::string json =
        doc->dump(-1, ' ', false, cohort::Json::error_handler_t::replace);
    if (doc->is_object() &&
        json ==
            doc->dump(-1, ' ', false, cohort::Json::error_handler_t::ignore)) {
      auto again = cohort::ParseKubeconfigText(json, kPath);
      COHORT_CHECK(again.ok() && *again == *doc) << json;
    }
  }

  cohort::FakeEnv env;
  env.SetFile(kPath, text);
  env.SetFile("/fuzz/kube/token", "fuzz-token\n");
  auto config = cohort::LoadKubeconfig(&env, std::string(kPath));
  if (config.ok()) {
    COHORT_CHECK(!config->server.empty());
    COHORT_CHECK(absl::StrContains(config->source, kPath)) << config->source;
  } else if (!(cohort::fuzz::SkipKnownBugs() &&
               IsUnreadableTokenFile(config.status()))) {
    const absl::StatusCode code = config.status().code();
    COHORT_CHECK(code == absl::StatusCode::kInvalidArgument ||
                 code == absl::StatusCode::kFailedPrecondition)
        << config.status();
    COHORT_CHECK(absl::StrContains(config.status().message(), kPath))
        << config.status();
  }
  EmptyTempDir();
  return 0;
}
