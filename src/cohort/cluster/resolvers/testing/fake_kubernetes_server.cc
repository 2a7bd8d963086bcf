#include "cohort/cluster/resolvers/testing/fake_kubernetes_server.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"

namespace cohort::testing {

Json FakeKubernetesServer::PodList(const std::vector<FakePod>& pods) {
  Json items = Json::array();
  int uid = 0;
  for (const FakePod& pod : pods) {
    Json status = {{"phase", pod.phase},
                   {"conditions", Json::array()},
                   {"qosClass", "BestEffort"}};
    if (!pod.host_ip.empty()) {
      status["hostIP"] = pod.host_ip;
      status["podIP"] = absl::StrCat("172.17.0.", ++uid);
    }
    items.push_back(
        {{"metadata",
          {{"name", pod.name},
           {"namespace", pod.namespace_name},
           {"uid", absl::StrCat("00000000-0000-0000-0000-", uid)},
           {"labels", Json::object()}}},
         {"spec",
          {{"containers",
            Json::array({{{"name", "main"}, {"image", "tensorflow"}}})}}},
         {"status", std::move(status)}});
  }
  return {{"kind", "PodList"},
          {"apiVersion", "v1"},
          {"metadata", {{"resourceVersion", "12345"}}},
          {"items", std::move(items)}};
}

FakeKubernetesServer::FakeKubernetesServer(
    std::optional<std::string> required_token,
    std::optional<TlsServerCertificate> tls)
    : FakeHttpServer(std::move(tls)),
      required_token_(std::move(required_token)) {
  server().Get("/api/v1/pods",
               [this](const httplib::Request& req, httplib::Response& res) {
                 HandleList(req, res, std::nullopt);
               });
  // httplib matches the whole path against the pattern; it decodes the path
  // first, so matches[1] is the namespace as the client meant it.
  server().Get(R"(/api/v1/namespaces/([^/]+)/pods)",
               [this](const httplib::Request& req, httplib::Response& res) {
                 HandleList(req, res, std::string(req.matches[1]));
               });
}

void FakeKubernetesServer::HandleList(
    const httplib::Request& req, httplib::Response& res,
    const std::optional<std::string>& namespace_name) {
  if (required_token_.has_value() &&
      req.get_header_value("Authorization") !=
          absl::StrCat("Bearer ", *required_token_)) {
    Reply(res, 401,
          {{"kind", "Status"},
           {"apiVersion", "v1"},
           {"status", "Failure"},
           {"message", "Unauthorized"},
           {"reason", "Unauthorized"},
           {"code", 401}});
    return;
  }
  const std::string selector = req.get_param_value("labelSelector");
  absl::MutexLock lock(&mu_);
  if (failure_.has_value()) {
    res.status = failure_->first;
    res.set_content(failure_->second, "application/json");
    return;
  }
  Json items = Json::array();
  auto it = items_.find(selector);
  if (it != items_.end()) {
    static const Json::json_pointer kNamespace("/metadata/namespace");
    for (const Json& item : it->second) {
      if (!namespace_name.has_value() ||
          (item.is_object() && item.contains(kNamespace) &&
           item[kNamespace] == *namespace_name)) {
        items.push_back(item);
      }
    }
  }
  Json list = PodList({});
  list["items"] = std::move(items);
  Reply(res, 200, list);
}

void FakeKubernetesServer::SetPods(const std::string& label_selector,
                                   std::vector<FakePod> pods) {
  Json list = PodList(pods);
  absl::MutexLock lock(&mu_);
  items_[label_selector] = std::move(list["items"]);
}

void FakeKubernetesServer::SetPodList(const std::string& label_selector,
                                      const Json& pod_list) {
  absl::MutexLock lock(&mu_);
  items_[label_selector] = pod_list.value("items", Json::array());
}

void FakeKubernetesServer::FailWith(
    std::optional<std::pair<int, std::string>> failure) {
  absl::MutexLock lock(&mu_);
  failure_ = std::move(failure);
}

std::string FakeKubernetesServer::Kubeconfig(const std::string& token) const {
  return absl::StrCat(
      "current-context: c\ncontexts:\n- name: c\n  context:\n    cluster: "
      "k\n    user: u\nclusters:\n- name: k\n  cluster:\n    server: ",
      base_url(), "\nusers:\n- name: u\n  user:\n    token: ", token, "\n");
}

absl::StatusOr<Json> IndexedJobPods(const std::string& source_dir, int n) {
  const std::string path = absl::StrCat(
      source_dir,
      "/src/cohort/cluster/resolvers/testing/indexed_job_pods.json");
  absl::StatusOr<std::string> text = Env::Default()->ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<Json> list = ParseJson(*text, path);
  if (!list.ok()) return list.status();
  Json items = Json::array();
  for (const Json& pod : (*list)["items"]) {
    int index = 0;
    const Json& value = pod["metadata"]["annotations"]
                           ["batch.kubernetes.io/"
                            "job-completion-index"];
    if (!value.is_string() ||
        !absl::SimpleAtoi(value.get<std::string>(), &index)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a pod without a completion index"));
    }
    if (index < n) items.push_back(pod);
  }
  (*list)["items"] = items;
  return list;
}

}  // namespace cohort::testing
