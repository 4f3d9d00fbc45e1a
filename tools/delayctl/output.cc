#include "output.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace delayctl {

using nlohmann::json;

int Check(const Reply& r) {
  if (!r.not_delayd.empty()) {
    std::cerr << "delayctl: " << r.not_delayd << "\n";
    return kUnavailable;
  }
  if (r.status == 0) {
    std::cerr << "delayctl: no answer from the server: " << r.error << "\n";
    return kUnavailable;
  }
  if (r.status >= 200 && r.status < 300) return kOk;
  json p = r.json();
  std::string what = "HTTP " + std::to_string(r.status);
  if (p.is_object()) {
    what += ": " + p.value("title", std::string());
    if (p.contains("detail") && p["detail"].is_string())
      what += ": " + p["detail"].get<std::string>();
    if (p.contains("field") && p["field"].is_string())
      what += " (field " + p["field"].get<std::string>() + ")";
  } else if (!r.body.empty()) {
    what += ": " + r.body.substr(0, 200);
  }
  std::cerr << "delayctl: " << what << "\n";
  switch (r.status) {
    case 401:
      return kUnauthorized;
    case 404:
      return kNotFound;
    case 409:
      return kConflict;
    default:
      return r.status >= 500 ? kUnavailable : kRefused;
  }
}

int CheckShape(const Reply& r, std::initializer_list<const char*> fields) {
  if (int rc = Check(r); rc != kOk) return rc;
  const json j = r.json();
  for (const char* f : fields) {
    if (!j.is_object() || !j.contains(f)) {
      std::cerr << "delayctl: " << r.server << " answered without \"" << f
                << "\": not the delayd API this delayctl knows (check --server)\n";
      return kUnavailable;
    }
  }
  return kOk;
}

int Usage(const std::string& message) {
  std::cerr << "delayctl: " << message << "\n";
  return kUsage;
}

std::string Cell(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

void PrintTable(const std::vector<std::string>& headers,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) width[i] = headers[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], std::min<size_t>(row[i].size(), 60));
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string c = cells[i];
      for (char& ch : c) {
        if (ch == '\n' || ch == '\t') ch = ' ';
      }
      if (c.size() > 60) c = c.substr(0, 57) + "...";
      out += c;
      if (i + 1 < cells.size()) out += std::string(width[i] - c.size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  line(headers);
  for (const auto& row : rows) line(row);
}

namespace {

void Flatten(const json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& [k, v] : j.items()) {
    const std::string name = prefix.empty() ? k : prefix + "." + k;
    if (v.is_object() && !v.empty()) {
      Flatten(v, name, out);
    } else {
      out.emplace_back(name, Cell(v));
    }
  }
}

}  // namespace

void PrintFields(const json& object) {
  std::vector<std::pair<std::string, std::string>> fields;
  Flatten(object, "", fields);
  size_t w = 0;
  for (const auto& f : fields) w = std::max(w, f.first.size());
  for (const auto& [k, v] : fields)
    std::cout << k << ":" << std::string(w - k.size() + 1, ' ') << v << "\n";
}

void PrintRaw(const Reply& r) {
  std::cout << r.body;
  if (r.body.empty() || r.body.back() != '\n') std::cout << "\n";
}

}  // namespace delayctl
