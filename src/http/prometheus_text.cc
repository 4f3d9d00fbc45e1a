#include "http/prometheus_text.h"

#include <fmt/format.h>

#include <cmath>

namespace delayd::http {

namespace {

// HELP text escapes backslash and newline; label values also the double quote.
void Escape(std::string& out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

}  // namespace

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  Escape(out_, help, false);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusText::Series(std::string_view name, const Labels& labels, std::string_view le) {
  out_ += name;
  if (labels.empty() && le.empty()) return;
  out_ += '{';
  bool first = true;
  auto label = [&](std::string_view k, std::string_view v) {
    if (!first) out_ += ',';
    first = false;
    out_ += k;
    out_ += "=\"";
    Escape(out_, v, true);
    out_ += '"';
  };
  for (const auto& [k, v] : labels) label(k, v);
  if (!le.empty()) label("le", le);
  out_ += '}';
}

void PrometheusText::Sample(std::string_view name, const Labels& labels, double value) {
  Series(name, labels, {});
  out_ += ' ';
  out_ += Number(value);
  out_ += '\n';
}

void PrometheusText::Sample(std::string_view name, const Labels& labels, uint64_t value) {
  Series(name, labels, {});
  out_ += ' ';
  out_ += std::to_string(value);
  out_ += '\n';
}

void PrometheusText::Histogram(std::string_view name, const Labels& labels,
                               const HistogramSnapshot& h) {
  const std::string bucket = std::string(name) + "_bucket";
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    Series(bucket, labels, Number(h.bounds[i]));
    out_ += ' ' + std::to_string(h.cumulative[i]) + '\n';
  }
  Series(bucket, labels, "+Inf");
  out_ += ' ' + std::to_string(h.count) + '\n';
  Sample(std::string(name) + "_sum", labels, h.sum);
  Sample(std::string(name) + "_count", labels, h.count);
}

}  // namespace delayd::http
