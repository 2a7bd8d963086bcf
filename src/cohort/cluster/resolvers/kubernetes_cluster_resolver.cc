#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolver_registry.h"

namespace cohort {
namespace {

// ---------------------------------------------------------------------------
// Kubeconfig YAML subset.

struct YamlLine {
  int indent;
  std::string text;
  int number;  // 1-based
};

class YamlSubsetParser {
 public:
  YamlSubsetParser(std::vector<YamlLine> lines, std::string what)
      : lines_(std::move(lines)), what_(std::move(what)) {}

  absl::StatusOr<Json> Parse() {
    if (lines_.empty()) return Json::object();
    size_t i = 0;
    COHORT_ASSIGN_OR_RETURN(Json root, ParseNode(&i, lines_[0].indent));
    if (i < lines_.size()) return Error(lines_[i], "unexpected indentation");
    return root;
  }

 private:
  absl::Status Error(const YamlLine& line, absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(
        what_, ": line ", line.number, ": ", why, " in \"", line.text,
        "\"; expected the block-style YAML kubectl writes (or JSON)"));
  }

  static bool IsSeqItem(const std::string& text) {
    return text == "-" || absl::StartsWith(text, "- ");
  }

  // Deeper nesting than any kubeconfig has is refused: the parser recurses
  // once per level, and "- - - ... x" on one line would exhaust the stack
  // (found by fuzz_kubeconfig).
  static constexpr int kMaxDepth = 64;

  absl::StatusOr<Json> ParseNode(size_t* i, int indent) {
    if (depth_ >= kMaxDepth) {
      return Error(lines_[*i], absl::StrCat("nested more than ", kMaxDepth,
                                            " levels deep"));
    }
    ++depth_;
    absl::StatusOr<Json> node = IsSeqItem(lines_[*i].text)
                                    ? ParseSequence(i, indent)
                                    : ParseMapping(i, indent);
    --depth_;
    return node;
  }

  // Finds the ": " (or trailing ':') ending a mapping key outside quotes.
  static size_t FindKeyColon(const std::string& text) {
    char quote = 0;
    for (size_t k = 0; k < text.size(); ++k) {
      char c = text[k];
      if (quote) {
        if (c == quote) quote = 0;
        continue;
      }
      if ((c == '"' || c == '\'') && k == 0) {
        quote = c;
        continue;
      }
      if (c == ':' && (k + 1 == text.size() || text[k + 1] == ' ')) return k;
    }
    return std::string::npos;
  }

  absl::StatusOr<Json> Scalar(const YamlLine& line, absl::string_view raw) {
    std::string s(absl::StripAsciiWhitespace(raw));
    if (s.empty() || s == "~" || s == "null") return Json();
    if (s == "true" || s == "True") return Json(true);
    if (s == "false" || s == "False") return Json(false);
    if (s == "|" || s == ">" || s[0] == '|' || s[0] == '>' || s[0] == '&' ||
        s[0] == '*' || s[0] == '!') {
      return Error(line, "block scalars, anchors and tags are not supported");
    }
    if (s[0] == '{' || s[0] == '[') {
      absl::StatusOr<Json> flow = ParseJson(s, what_);
      if (!flow.ok()) return Error(line, "unsupported flow collection");
      return flow;
    }
    if (s[0] == '"') {
      if (s.size() < 2 || s.back() != '"')
        return Error(line, "unterminated \"");
      std::string out;
      std::string error;
      if (!absl::CUnescape(s.substr(1, s.size() - 2), &out, &error)) {
        return Error(line, absl::StrCat("bad escape: ", error));
      }
      return Json(out);
    }
    if (s[0] == '\'') {
      if (s.size() < 2 || s.back() != '\'')
        return Error(line, "unterminated '");
      std::string body = s.substr(1, s.size() - 2);
      std::string out;
      for (size_t k = 0; k < body.size(); ++k) {
        out.push_back(body[k]);
        if (body[k] == '\'' && k + 1 < body.size() && body[k + 1] == '\'') ++k;
      }
      return Json(out);
    }
    return Json(s);
  }

  absl::StatusOr<Json> ParseMapping(size_t* i, int indent) {
    Json out = Json::object();
    while (*i < lines_.size() && lines_[*i].indent == indent &&
           !IsSeqItem(lines_[*i].text)) {
      const YamlLine line = lines_[*i];
      size_t colon = FindKeyColon(line.text);
      if (colon == std::string::npos)
        return Error(line, "expected \"key: value\"");
      COHORT_ASSIGN_OR_RETURN(Json key,
                              Scalar(line, line.text.substr(0, colon)));
      if (!key.is_string()) return Error(line, "mapping key must be text");
      std::string rest = std::string(absl::StripAsciiWhitespace(
          absl::string_view(line.text).substr(colon + 1)));
      ++*i;
      Json value;
      if (!rest.empty()) {
        COHORT_ASSIGN_OR_RETURN(value, Scalar(line, rest));
      } else if (*i < lines_.size() && lines_[*i].indent > indent) {
        COHORT_ASSIGN_OR_RETURN(value, ParseNode(i, lines_[*i].indent));
      } else if (*i < lines_.size() && lines_[*i].indent == indent &&
                 IsSeqItem(lines_[*i].text)) {
        COHORT_ASSIGN_OR_RETURN(value, ParseSequence(i, indent));
      }
      out[key.get<std::string>()] = std::move(value);
    }
    if (*i < lines_.size() && lines_[*i].indent > indent) {
      return Error(lines_[*i], "unexpected indentation");
    }
    return out;
  }

  absl::StatusOr<Json> ParseSequence(size_t* i, int indent) {
    Json out = Json::array();
    while (*i < lines_.size() && lines_[*i].indent == indent &&
           IsSeqItem(lines_[*i].text)) {
      const YamlLine line = lines_[*i];
      std::string rest = line.text == "-" ? "" : line.text.substr(2);
      size_t lead = rest.find_first_not_of(' ');
      if (rest.empty() || lead == std::string::npos) {
        ++*i;
        if (*i < lines_.size() && lines_[*i].indent > indent) {
          COHORT_ASSIGN_OR_RETURN(Json v, ParseNode(i, lines_[*i].indent));
          out.push_back(std::move(v));
        } else {
          out.push_back(Json());
        }
        continue;
      }
      int child_indent = indent + 2 + static_cast<int>(lead);
      rest = rest.substr(lead);
      if (IsSeqItem(rest) || FindKeyColon(rest) != std::string::npos) {
        // "- key: value" opens a mapping (or nested sequence) whose further
        // entries sit at the column of "key".
        lines_[*i] = YamlLine{child_indent, rest, line.number};
        COHORT_ASSIGN_OR_RETURN(Json v, ParseNode(i, child_indent));
        out.push_back(std::move(v));
      } else {
        COHORT_ASSIGN_OR_RETURN(Json v, Scalar(line, rest));
        out.push_back(std::move(v));
        ++*i;
      }
    }
    return out;
  }

  std::vector<YamlLine> lines_;
  int depth_ = 0;  // ParseNode calls in progress
  std::string what_;
};

std::string StripYamlComment(const std::string& line) {
  char quote = 0;
  for (size_t k = 0; k < line.size(); ++k) {
    char c = line[k];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (k == 0 || line[k - 1] == ' ')) {
      return line.substr(0, k);
    }
  }
  return line;
}

// ---------------------------------------------------------------------------

absl::StatusOr<std::string> WriteTempFile(absl::string_view contents,
                                          absl::string_view what) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmpdir && *tmpdir ? tmpdir : "/tmp", "/cohort-kube-XXXXXX");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  int fd = mkstemp(buf.data());  // mode 0600
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create a temporary file for ", what));
  }
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n <= 0) {
      close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", what));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return std::string(buf.data());
}

const Json* FindNamed(const Json& list, const std::string& name,
                      const char* inner) {
  if (!list.is_array()) return nullptr;
  for (const Json& entry : list) {
    if (entry.is_object() && entry.value("name", Json()).is_string() &&
        entry["name"].get<std::string>() == name && entry.contains(inner) &&
        entry[inner].is_object()) {
      return &entry[inner];
    }
  }
  return nullptr;
}

// obj[key] by reference, or a null Json when absent.
const Json& Member(const Json& obj, const char* key) {
  static const Json* const kNull = new Json();
  if (!obj.is_object()) return *kNull;
  auto it = obj.find(key);
  return it == obj.end() ? *kNull : *it;
}

std::string StringField(const Json& obj, const char* key) {
  if (obj.is_object() && obj.contains(key) && obj[key].is_string()) {
    return obj[key].get<std::string>();
  }
  return std::string();
}

// Resolves a path relative to the kubeconfig's directory.
std::string RelativeTo(const std::string& file, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  size_t slash = file.rfind('/');
  if (slash == std::string::npos) return path;
  return absl::StrCat(file.substr(0, slash + 1), path);
}

// Returns the path of a PEM either named by `key` or inlined (base64) in
// `key`-data.
absl::StatusOr<std::string> PemPath(const Json& obj, const char* key,
                                    const std::string& file) {
  std::string path = StringField(obj, key);
  if (!path.empty()) return RelativeTo(file, path);
  std::string data = StringField(obj, absl::StrCat(key, "-data").c_str());
  if (data.empty()) return std::string();
  std::string decoded;
  if (!absl::Base64Unescape(data, &decoded)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kubeconfig ", file, ": ", key, "-data is not valid base64"));
  }
  return WriteTempFile(decoded, absl::StrCat(key, "-data of ", file));
}

// ---------------------------------------------------------------------------
// Pod lists.

// What the resolver reads of one pod of a PodList.
struct PodInfo {
  std::string name;
  std::string namespace_name;
  std::string phase;
  std::string host_ip;
  std::string pod_ip;
  // metadata.deletionTimestamp is set: the pod is terminating and will not
  // stand for its index any more, whatever its phase still says.
  bool deleting = false;
  // The annotation and the label "batch.kubernetes.io/job-completion-index"
  // (nullopt when absent or not text).
  std::optional<std::string> index_annotation;
  std::optional<std::string> index_label;
  // The Job's uid, for telling the pods of two Jobs apart in messages.
  std::string controller_uid;
};

constexpr char kCompletionIndexKey[] =
    "batch.kubernetes.io/job-completion-index";

std::optional<std::string> OptionalStringField(const Json& obj,
                                               const char* key) {
  const Json& v = Member(obj, key);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

absl::StatusOr<std::vector<PodInfo>> ParsePods(const Json& list,
                                               const std::string& what) {
  std::vector<PodInfo> pods;
  const Json& items = Member(list, "items");
  if (!items.is_array()) return pods;  // "items": null is an empty list
  for (const Json& item : items) {
    const Json& metadata = Member(item, "metadata");
    const Json& status = Member(item, "status");
    const Json& labels = Member(metadata, "labels");
    PodInfo pod;
    pod.name = StringField(metadata, "name");
    if (pod.name.empty()) {
      return absl::InternalError(absl::StrCat(
          what, ": a pod without metadata.name: ", JsonPreview(item)));
    }
    pod.namespace_name = StringField(metadata, "namespace");
    pod.phase = StringField(status, "phase");
    pod.host_ip = StringField(status, "hostIP");
    pod.pod_ip = StringField(status, "podIP");
    pod.deleting = !Member(metadata, "deletionTimestamp").is_null();
    pod.index_annotation = OptionalStringField(Member(metadata, "annotations"),
                                               kCompletionIndexKey);
    pod.index_label = OptionalStringField(labels, kCompletionIndexKey);
    // Kubernetes 1.27+ sets the prefixed label; older ones only the bare one.
    pod.controller_uid =
        StringField(labels, "batch.kubernetes.io/controller-uid");
    if (pod.controller_uid.empty()) {
      pod.controller_uid = StringField(labels, "controller-uid");
    }
    pods.push_back(std::move(pod));
  }
  return pods;
}

// A completion index as the Job controller writes it (strconv.Itoa of a
// non-negative int): decimal digits only, no sign or blanks. Nine digits at
// most, far above any Job's completions, so the value fits an int.
std::optional<int> ParseCompletionIndex(absl::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return std::nullopt;
    }
    value = value * 10 + (c - '0');
  }
  return value;
}

absl::StatusOr<int> CompletionIndexOf(const PodInfo& pod,
                                      absl::string_view context) {
  const char* source = "annotation";
  const std::optional<std::string>* text = &pod.index_annotation;
  if (!text->has_value()) {
    source = "label";
    text = &pod.index_label;
  }
  if (!text->has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Pod \"", pod.name, "\" has no ", kCompletionIndexKey,
        " annotation or label (", context,
        "); completion-index order needs the pods of an Indexed Job "
        "(completionMode: Indexed) and a selector matching only them"));
  }
  std::optional<int> index = ParseCompletionIndex(**text);
  if (!index.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Pod \"", pod.name, "\" has ", source, " ", kCompletionIndexKey, "=\"",
        **text, "\", which is not a completion index (", context, ")"));
  }
  if (pod.index_annotation.has_value() && pod.index_label.has_value() &&
      *pod.index_annotation != *pod.index_label) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Pod \"", pod.name, "\" has annotation ", kCompletionIndexKey, "=\"",
        *pod.index_annotation, "\" but label \"", *pod.index_label, "\" (",
        context, ")"));
  }
  return *index;
}

// "\"train-2-x7k2p\" (phase \"Failed\"), \"train-2-q4wz9\" (phase
// \"Running\", being deleted)" for messages about one index.
std::string DescribePods(const std::vector<const PodInfo*>& pods) {
  std::vector<std::string> parts;
  for (const PodInfo* pod : pods) {
    parts.push_back(absl::StrCat("\"", pod->name, "\" (phase \"", pod->phase,
                                 "\"", pod->deleting ? ", being deleted" : "",
                                 ")"));
  }
  return absl::StrJoin(parts, ", ");
}

// The running pod standing for `index` among all listed pods of it.
absl::StatusOr<const PodInfo*> PodForIndex(
    int index, const std::vector<const PodInfo*>& listed,
    absl::string_view context) {
  std::vector<const PodInfo*> running;
  for (const PodInfo* pod : listed) {
    // A Job's pod runs once: a failed or evicted one is replaced by a new
    // pod (new name, usually a new IP) for the same index, and the old one
    // stays listed, Failed or terminating, until it is deleted. Only a
    // running pod not being deleted is a live peer.
    if (pod->phase == "Running" && !pod->deleting) running.push_back(pod);
  }
  if (running.size() == 1) return running[0];
  if (running.empty()) {
    // Still FailedPrecondition when every pod of the index has ended: the
    // Job controller may yet replace a failed one (backoffLimit,
    // podFailurePolicy), which this list cannot tell; the message says so.
    const bool all_ended =
        !listed.empty() &&
        std::all_of(listed.begin(), listed.end(), [](const PodInfo* pod) {
          return pod->phase == "Failed" || pod->phase == "Succeeded";
        });
    return absl::FailedPreconditionError(absl::StrCat(
        "No running pod for completion index ", index, " (", context, "): ",
        listed.empty() ? "no pod of it is listed"
                       : absl::StrCat("listed: ", DescribePods(listed)),
        all_ended ? "; every pod of it has ended, so retrying helps only if "
                    "the Job controller replaces it (check the Job's status)"
                  : "; the Job's pods are still being created, starting or "
                    "replaced, retry until every index has a running pod"));
  }
  std::vector<std::string> who;
  for (const PodInfo* pod : running) {
    who.push_back(absl::StrCat("\"", pod->namespace_name, "/", pod->name,
                               "\" (controller-uid \"", pod->controller_uid,
                               "\")"));
  }
  for (const PodInfo* pod : running) {
    if (pod->namespace_name != running[0]->namespace_name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Completion index ", index,
          " has running pods in several namespaces (", context,
          "): ", absl::StrJoin(who, ", "),
          "; set the namespace so that the selector matches one Job"));
    }
  }
  // Same namespace: the Job controller deletes a duplicate it created, and
  // the pods of a Job deleted and re-created under the same name go away
  // with garbage collection; both pass, so a retry is the answer.
  return absl::FailedPreconditionError(absl::StrCat(
      "Completion index ", index, " has ", running.size(), " running pods (",
      context, "): ", absl::StrJoin(who, ", "),
      "; retry once the extra pods are deleted, or select by "
      "batch.kubernetes.io/controller-uid if pods of another Job linger"));
}

// The pods of indexes 0..max in index order (see Options::order).
absl::StatusOr<std::vector<PodInfo>> OrderByCompletionIndex(
    const std::vector<PodInfo>& pods, absl::string_view context) {
  // An index may be listed several times (earlier incarnations), so group
  // first; a map, not a vector indexed by value, as the values come from
  // the API and a stray large one must not size an allocation.
  std::map<int, std::vector<const PodInfo*>> by_index;
  for (const PodInfo& pod : pods) {
    COHORT_ASSIGN_OR_RETURN(int index, CompletionIndexOf(pod, context));
    by_index[index].push_back(&pod);
  }
  std::vector<PodInfo> ordered;
  if (by_index.empty()) return ordered;
  static const std::vector<const PodInfo*>* const kNone =
      new std::vector<const PodInfo*>();
  const int max = by_index.rbegin()->first;
  for (int index = 0; index <= max; ++index) {
    auto it = by_index.find(index);
    COHORT_ASSIGN_OR_RETURN(
        const PodInfo* pod,
        PodForIndex(index, it == by_index.end() ? *kNone : it->second,
                    context));
    ordered.push_back(*pod);
  }
  return ordered;
}

// TensorFlow's order: by name as text, every pod running.
absl::StatusOr<std::vector<PodInfo>> OrderByName(std::vector<PodInfo> pods,
                                                 absl::string_view context) {
  // Sorted by name so the order does not change from call to call.
  std::stable_sort(
      pods.begin(), pods.end(),
      [](const PodInfo& a, const PodInfo& b) { return a.name < b.name; });
  for (const PodInfo& pod : pods) {
    if (pod.phase != "Running") {
      return absl::FailedPreconditionError(absl::StrCat(
          "Pod \"", pod.name, "\" is not running; phase: \"", pod.phase, "\" (",
          context, "; wait until every pod of the job runs)"));
    }
  }
  return pods;
}

// "<ip>:<port>" of a running pod, the ip as options.address says.
absl::StatusOr<std::string> TaskAddress(
    const PodInfo& pod, const KubernetesClusterResolver::Options& options,
    const std::string& context, const std::string& what) {
  const int port = options.tf_server_port;
  if (options.address == KubernetesClusterResolver::AddressSource::kHostIp) {
    if (pod.host_ip.empty()) {
      return absl::InternalError(absl::StrCat(
          what, ": running pod \"", pod.name, "\" has no status.hostIP"));
    }
    return absl::StrCat(pod.host_ip, ":", port);
  }
  // Pod networking: every pod has its own IP, while the pods of one node
  // share its hostIP (and would collide on the port).
  if (pod.pod_ip.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Pod \"", pod.name, "\" is running but has no status.podIP (", context,
        "); retry once the kubelet reports it"));
  }
  // IPv6 pod networks (and dual-stack ones listing IPv6 first) give
  // "fd00::5"; brackets keep the port separable.
  if (pod.pod_ip.find(':') != std::string::npos) {
    return absl::StrCat("[", pod.pod_ip, "]:", port);
  }
  return absl::StrCat(pod.pod_ip, ":", port);
}

}  // namespace

absl::Status KubernetesOptionsFromEnv(
    Env* env, KubernetesClusterResolver::Options* options) {
  if (auto jobs = env->GetVar("COHORT_KUBERNETES_JOBS");
      jobs && !jobs->empty()) {
    COHORT_ASSIGN_OR_RETURN(Json j, ParseJson(*jobs, "COHORT_KUBERNETES_JOBS"));
    options->job_to_label_mapping.clear();
    bool ok = j.is_object() && !j.empty();
    for (auto it = j.begin(); ok && it != j.end(); ++it) {
      if (!it.value().is_array()) {
        ok = false;
        break;
      }
      for (const Json& s : it.value()) {
        if (!s.is_string()) {
          ok = false;
          break;
        }
        options->job_to_label_mapping[it.key()].push_back(s.get<std::string>());
      }
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "COHORT_KUBERNETES_JOBS=", *jobs,
          " is not valid: expected a JSON object mapping each job to a list "
          "of label selectors, e.g. {\"worker\": "
          "[\"job-name=tensorflow\"]}"));
    }
  }
  if (auto port = env->GetVar("COHORT_KUBERNETES_PORT");
      port && !port->empty()) {
    if (!absl::SimpleAtoi(*port, &options->tf_server_port) ||
        options->tf_server_port <= 0 || options->tf_server_port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("COHORT_KUBERNETES_PORT=\"", *port,
                       "\" is not valid: expected a port number 1-65535"));
    }
  }
  if (auto ns = env->GetVar("COHORT_KUBERNETES_NAMESPACE");
      ns && !ns->empty()) {
    options->pod_namespace = *ns;
  }
  if (auto order = env->GetVar("COHORT_KUBERNETES_ORDER");
      order && !order->empty()) {
    if (*order == "name") {
      options->order = KubernetesClusterResolver::PodOrder::kByName;
    } else if (*order == "completion-index") {
      options->order = KubernetesClusterResolver::PodOrder::kByCompletionIndex;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("COHORT_KUBERNETES_ORDER=\"", *order,
                       "\" is not valid: expected name or completion-index"));
    }
  }
  if (auto address = env->GetVar("COHORT_KUBERNETES_ADDRESS");
      address && !address->empty()) {
    if (*address == "host-ip") {
      options->address = KubernetesClusterResolver::AddressSource::kHostIp;
    } else if (*address == "pod-ip") {
      options->address = KubernetesClusterResolver::AddressSource::kPodIp;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("COHORT_KUBERNETES_ADDRESS=\"", *address,
                       "\" is not valid: expected host-ip or pod-ip"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseKubeconfigText(absl::string_view text,
                                         absl::string_view what) {
  absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  if (!trimmed.empty() && trimmed[0] == '{') return ParseJson(text, what);
  std::vector<YamlLine> lines;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    std::string line =
        StripYamlComment(std::string(absl::StripSuffix(raw, "\r")));
    if (line.find('\t') != std::string::npos &&
        line.find_first_not_of(" \t") != std::string::npos &&
        line.find_first_not_of(' ') < line.size() &&
        line[line.find_first_not_of(' ')] == '\t') {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": line ", number, ": tabs are not allowed for indentation"));
    }
    size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    std::string content(absl::StripTrailingAsciiWhitespace(line.substr(first)));
    if (content == "---" || content == "...") continue;
    lines.push_back(YamlLine{static_cast<int>(first), content, number});
  }
  return YamlSubsetParser(std::move(lines), std::string(what)).Parse();
}

absl::StatusOr<KubernetesApiConfig> LoadInClusterKubernetesConfig(
    Env* env, const std::string& service_account_dir) {
  std::optional<std::string> host = env->GetVar("KUBERNETES_SERVICE_HOST");
  std::optional<std::string> port = env->GetVar("KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    return absl::FailedPreconditionError(
        "Kubernetes in-cluster configuration: KUBERNETES_SERVICE_HOST and "
        "KUBERNETES_SERVICE_PORT must be set (not running in a pod? use "
        "OFF_CLUSTER with a kubeconfig instead)");
  }
  KubernetesApiConfig config;
  std::string h = *host;
  if (h.find(':') != std::string::npos && h[0] != '[')
    h = absl::StrCat("[", h, "]");
  config.server = absl::StrCat("https://", h, ":", *port);
  std::string token_path = absl::StrCat(service_account_dir, "/token");
  absl::StatusOr<std::string> token = env->ReadFile(token_path);
  if (!token.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Kubernetes in-cluster configuration: cannot read the service-account "
        "token ",
        token_path, ": ", token.status().message(),
        " (is a service account mounted into the pod?)"));
  }
  config.token = std::string(absl::StripAsciiWhitespace(*token));
  if (config.token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Kubernetes in-cluster configuration: the service-account token ",
        token_path, " is empty (is the projected token volume mounted?)"));
  }
  // The CA is read here, through `env` like the token, and handed to the
  // HTTP client as text: a missing CA fails now naming its file, rather
  // than at the first request, and the client trusts that CA alone.
  const std::string ca_path = absl::StrCat(service_account_dir, "/ca.crt");
  absl::StatusOr<std::string> ca = env->ReadFile(ca_path);
  if (!ca.ok() || absl::StripAsciiWhitespace(*ca).empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Kubernetes in-cluster configuration: cannot read the cluster CA "
        "certificate ",
        ca_path, ": ", ca.ok() ? "the file is empty" : ca.status().message(),
        " (is a service account mounted into the pod? it holds the CA that "
        "verifies the API server)"));
  }
  config.http.ca_cert_pem = *std::move(ca);
  config.http.ca_cert_path = ca_path;
  config.source =
      absl::StrCat("in-cluster service account (", service_account_dir, ")");
  return config;
}

absl::StatusOr<std::string> ReadServiceAccountNamespace(
    Env* env, const std::string& service_account_dir) {
  std::string path = absl::StrCat(service_account_dir, "/namespace");
  absl::StatusOr<std::string> text = env->ReadFile(path);
  if (!text.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Kubernetes pod namespace: cannot read ", path, ": ",
                     text.status().message(),
                     " (is a service account mounted into the pod? "
                     "automountServiceAccountToken must not be false)"));
  }
  std::string ns(absl::StripAsciiWhitespace(*text));
  if (ns.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Kubernetes pod namespace: ", path, " is empty"));
  }
  return ns;
}

absl::StatusOr<KubernetesApiConfig> LoadKubeconfig(
    Env* env, std::optional<std::string> path) {
  if (!path.has_value()) {
    std::optional<std::string> kubeconfig = env->GetVar("KUBECONFIG");
    if (kubeconfig && !kubeconfig->empty()) {
      path = std::string(*absl::StrSplit(*kubeconfig, ':').begin());
    } else {
      std::optional<std::string> home = env->GetVar("HOME");
      if (!home || home->empty()) {
        return absl::FailedPreconditionError(
            "kubeconfig: neither KUBECONFIG nor HOME is set; set KUBECONFIG "
            "to the path of a kubeconfig file");
      }
      path = absl::StrCat(*home, "/.kube/config");
    }
  }
  absl::StatusOr<std::string> text = env->ReadFile(*path);
  if (!text.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kubeconfig ", *path, ": cannot read: ", text.status().message(),
        " (set KUBECONFIG?)"));
  }
  COHORT_ASSIGN_OR_RETURN(
      Json doc, ParseKubeconfigText(*text, absl::StrCat("kubeconfig ", *path)));
  std::string context_name = StringField(doc, "current-context");
  if (context_name.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kubeconfig ", *path,
                     ": no current-context; run `kubectl config "
                     "use-context <name>`"));
  }
  const Json* context =
      FindNamed(Member(doc, "contexts"), context_name, "context");
  if (context == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("kubeconfig ", *path, ": current-context \"", context_name,
                     "\" is not among its contexts"));
  }
  std::string cluster_name = StringField(*context, "cluster");
  const Json* cluster =
      FindNamed(Member(doc, "clusters"), cluster_name, "cluster");
  if (cluster == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("kubeconfig ", *path, ": cluster \"", cluster_name,
                     "\" of context \"", context_name, "\" is not defined"));
  }
  KubernetesApiConfig config;
  config.source =
      absl::StrCat("kubeconfig ", *path, " (context ", context_name, ")");
  config.server = StringField(*cluster, "server");
  if (config.server.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kubeconfig ", *path, ": cluster \"", cluster_name,
                     "\" has no server"));
  }
  COHORT_ASSIGN_OR_RETURN(config.http.ca_cert_path,
                          PemPath(*cluster, "certificate-authority", *path));
  if (cluster->value("insecure-skip-tls-verify", Json(false)) == Json(true)) {
    // As kubectl: a CA and "skip verification" together are a mistake in
    // the file, not a choice between them.
    if (!config.http.ca_cert_path.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kubeconfig ", *path, ": cluster \"", cluster_name,
          "\" sets both certificate-authority and insecure-skip-tls-verify; "
          "remove one (kubectl refuses this too)"));
    }
    // The bearer token then goes to whoever answers at the server's address.
    COHORT_LOG(WARNING) << "kubeconfig " << *path << ": cluster \""
                        << cluster_name
                        << "\" sets insecure-skip-tls-verify: the API server "
                        << config.server
                        << " is not verified, and the token is sent to "
                           "whatever answers there";
    config.http.verify_server_certificate = false;
  }
  std::string user_name = StringField(*context, "user");
  const Json* user = FindNamed(Member(doc, "users"), user_name, "user");
  if (user != nullptr) {
    config.token = StringField(*user, "token");
    std::string token_file = StringField(*user, "tokenFile");
    if (config.token.empty() && !token_file.empty()) {
      absl::StatusOr<std::string> t =
          env->ReadFile(RelativeTo(*path, token_file));
      if (!t.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("kubeconfig ", *path, ": user \"", user_name,
                         "\" has tokenFile ", RelativeTo(*path, token_file),
                         ", which cannot be read: ", t.status().message()));
      }
      config.token = std::string(absl::StripAsciiWhitespace(*t));
    }
    COHORT_ASSIGN_OR_RETURN(config.http.client_cert_path,
                            PemPath(*user, "client-certificate", *path));
    COHORT_ASSIGN_OR_RETURN(config.http.client_key_path,
                            PemPath(*user, "client-key", *path));
    if (config.token.empty() && config.http.client_cert_path.empty() &&
        user->contains("exec")) {
      COHORT_LOG(WARNING) << "kubeconfig " << *path << ": user \"" << user_name
                          << "\" uses an exec credential plugin, which cohort "
                             "does not run; requests go unauthenticated";
    }
  }
  return config;
}

KubernetesClusterResolver::KubernetesClusterResolver(Options options,
                                                     KubernetesApiConfig api)
    : ClusterResolverWithTaskAttributes(std::nullopt, std::nullopt,
                                        options.rpc_layer),
      options_(std::move(options)),
      api_(std::move(api)),
      http_(api_.http) {
  while (!api_.server.empty() && api_.server.back() == '/') {
    api_.server.pop_back();
  }
}

absl::StatusOr<KubernetesClusterResolver::ExecutableLocation>
KubernetesClusterResolver::ParseExecutableLocation(absl::string_view text) {
  if (text == "WITHIN_CLUSTER") return ExecutableLocation::kWithinCluster;
  if (text == "OFF_CLUSTER") return ExecutableLocation::kOffCluster;
  return absl::InvalidArgumentError(
      absl::StrCat("The executable location provided is invalid. (got \"", text,
                   "\"; expected WITHIN_CLUSTER or OFF_CLUSTER)"));
}

absl::StatusOr<std::unique_ptr<KubernetesClusterResolver>>
KubernetesClusterResolver::Create(Env* env, Options options) {
  if (options.pod_namespace.has_value() && options.pod_namespace->empty()) {
    return absl::InvalidArgumentError(
        "Kubernetes resolver: pod_namespace is set but empty (leave it unset "
        "to list the pods of all namespaces)");
  }
  KubernetesApiConfig api;
  if (options.api.has_value()) {
    api = *options.api;
  } else if (options.executable_location ==
             ExecutableLocation::kWithinCluster) {
    COHORT_ASSIGN_OR_RETURN(api, LoadInClusterKubernetesConfig(env));
  } else {
    COHORT_ASSIGN_OR_RETURN(api, LoadKubeconfig(env));
  }
  return std::unique_ptr<KubernetesClusterResolver>(
      new KubernetesClusterResolver(std::move(options), std::move(api)));
}

absl::StatusOr<Json> KubernetesClusterResolver::ListPods(
    const std::string& selector, std::string* url) {
  HttpHeaders headers = {{"Accept", "application/json"}};
  if (!api_.token.empty()) {
    headers.emplace_back("Authorization", absl::StrCat("Bearer ", api_.token));
  }
  const std::string where =
      options_.pod_namespace.has_value()
          ? absl::StrCat("in namespace \"", *options_.pod_namespace, "\"")
          : std::string("in all namespaces");
  const std::string hint = absl::StrCat(
      "the Kubernetes API server from ",
      api_.source.empty() ? "the configuration" : api_.source,
      " (address, token, CA) and that the service account may list pods ",
      where);
  // The namespaced path is what a namespaced Role's "list pods" permits; a
  // list across namespaces needs a ClusterRole.
  *url = options_.pod_namespace.has_value()
             ? absl::StrCat(api_.server, "/api/v1/namespaces/",
                            UrlEncode(*options_.pod_namespace), "/pods")
             : absl::StrCat(api_.server, "/api/v1/pods");
  absl::StrAppend(url, "?labelSelector=", UrlEncode(selector));
  COHORT_ASSIGN_OR_RETURN(Json list, http_.GetJson(*url, headers, hint));
  if (!list.is_object() ||
      (list.contains("items") && !list["items"].is_array() &&
       !list["items"].is_null())) {
    return absl::InternalError(
        absl::StrCat("pod list from ", *url,
                     ": expected a PodList object with an \"items\" array, "
                     "got ",
                     JsonPreview(list)));
  }
  return list;
}

absl::StatusOr<ClusterSpec> KubernetesClusterResolver::cluster_spec() {
  ClusterSpec spec;
  for (const auto& [job, selectors] : options_.job_to_label_mapping) {
    std::vector<std::string> addresses;
    for (const std::string& selector : selectors) {
      std::string url;
      COHORT_ASSIGN_OR_RETURN(Json list, ListPods(selector, &url));
      const std::string what = absl::StrCat("pod list from ", url);
      COHORT_ASSIGN_OR_RETURN(std::vector<PodInfo> pods, ParsePods(list, what));
      const std::string context =
          absl::StrCat("selector \"", selector, "\" of job \"", job, "\"");
      COHORT_ASSIGN_OR_RETURN(pods,
                              options_.order == PodOrder::kByCompletionIndex
                                  ? OrderByCompletionIndex(pods, context)
                                  : OrderByName(std::move(pods), context));
      for (const PodInfo& pod : pods) {
        COHORT_ASSIGN_OR_RETURN(std::string address,
                                TaskAddress(pod, options_, context, what));
        addresses.push_back(std::move(address));
      }
    }
    spec.SetJob(job, addresses);
  }
  return spec;
}

void RegisterKubernetesResolver(ResolverRegistry* registry) {
  ResolverRegistration reg;
  reg.name = "kubernetes";
  reg.description =
      "Kubernetes pods by label selector (in-cluster service account, or "
      "KUBECONFIG off-cluster); COHORT_KUBERNETES_JOBS='{\"worker\": "
      "[\"job-name=tensorflow\"]}', COHORT_KUBERNETES_PORT=8470, "
      "COHORT_KUBERNETES_NAMESPACE (default: all), "
      "COHORT_KUBERNETES_ORDER=name|completion-index, "
      "COHORT_KUBERNETES_ADDRESS=host-ip|pod-ip";
  reg.factory =
      [](Env* env) -> absl::StatusOr<std::unique_ptr<ClusterResolver>> {
    KubernetesClusterResolver::Options options;
    COHORT_RETURN_IF_ERROR(KubernetesOptionsFromEnv(env, &options));
    std::optional<std::string> host = env->GetVar("KUBERNETES_SERVICE_HOST");
    options.executable_location =
        host && !host->empty()
            ? KubernetesClusterResolver::ExecutableLocation::kWithinCluster
            : KubernetesClusterResolver::ExecutableLocation::kOffCluster;
    COHORT_ASSIGN_OR_RETURN(auto r,
                            KubernetesClusterResolver::Create(env, options));
    return std::unique_ptr<ClusterResolver>(std::move(r));
  };
  reg.detector = [](Env* env) {
    auto host = env->GetVar("KUBERNETES_SERVICE_HOST");
    return host.has_value() && !host->empty();
  };
  reg.priority = 40;
  absl::Status s = registry->Register(std::move(reg));
  COHORT_CHECK(s.ok()) << s;
}

}  // namespace cohort
