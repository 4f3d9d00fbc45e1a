// Status and Result<T>: how delayd reports expected failures without exceptions.
//
// A Status is either OK or a code with a message. Result<T> holds a T or a
// non-OK Status. Library exceptions are caught at the adapter that calls the
// library and turned into one of these.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace delayd {

enum class StatusCode {
  kOk,
  kNotFound,
  kInvalidArgument,
  kIoError,      // the store could not read or write (I/O error, corruption)
  kNoSpace,      // the store's disk is full: nothing was applied; retry once space returns
  kUnavailable,  // shutting down or draining: the client may retry later
  kConflict,     // the job exists but its state forbids the operation (reserved, not buried...)
  // Cluster mode: a write made as a shard's owner after its lease moved to
  // another node (doc/cluster.md, "Leases and fencing"); nothing applied.
  kFenced,
  kInternal,
  // A write whose outcome could not be learned: the store's connection broke
  // with its commit in flight, and the store could not find out in time
  // whether it was kept. field() lists the ids of the jobs concerned.
  kUnknown,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Conflict(std::string m) { return {StatusCode::kConflict, std::move(m)}; }
  static Status Fenced(std::string m) { return {StatusCode::kFenced, std::move(m)}; }
  // kUnknown; `ids` ("12,13") are the jobs a client should look up before
  // it submits them again.
  static Status Unknown(std::string m, std::string ids = "") {
    Status s(StatusCode::kUnknown, std::move(m));
    s.field_ = std::move(ids);
    return s;
  }
  // Bad input in one named field of a request ("retry.max_attempts").
  static Status InvalidField(std::string field, std::string m) {
    Status s(StatusCode::kInvalidArgument, std::move(m));
    s.field_ = std::move(field);
    return s;
  }
  // A field whose value is well formed but clashes with what the server
  // holds (a timer name already in use).
  static Status ConflictField(std::string field, std::string m) {
    Status s(StatusCode::kConflict, std::move(m));
    s.field_ = std::move(field);
    return s;
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The offending input field of a kInvalidArgument or kConflict status,
  // the job ids of a kUnknown one; empty if none.
  const std::string& field() const { return field_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string field_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace delayd
