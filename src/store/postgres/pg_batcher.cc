#include "store/postgres/pg_batcher.h"

#include <algorithm>
#include <set>
#include <utility>

namespace delayd::store::pg {

void Batcher::Insert(const JobRecord& j, int shard) {
  if (!status_.ok()) return;
  SendDeletes();
  if (!inserts_) inserts_.emplace();
  inserts_->Add(j, shard);
  if (inserts_->rows() >= kInsertRows) SendInserts();
}

void Batcher::Delete(uint64_t id, std::optional<uint64_t> version, const char* if_none,
                     Status* own) {
  if (!status_.ok()) return;
  SendInserts();
  if (version && own == nullptr) {
    SendDeletes();
    Deletes one;
    one.Add(id, version, nullptr, nullptr);
    Track(conn_.Send("delete", one.ToParams()), {if_none, nullptr, StatusCode::kConflict, nullptr});
    return;
  }
  if (deletes_ && deletes_->Has(id)) SendDeletes();  // each id once a statement
  if (!deletes_) deletes_.emplace();
  deletes_->Add(id, version, version ? if_none : nullptr, own);
  if (deletes_->size() >= kInsertRows) SendDeletes();
}

void Batcher::Send(const char* name, const Params& p, const char* if_none, Status* own,
                   StatusCode refused, Rows rows) {
  SendInserts();
  SendDeletes();
  if (!status_.ok()) return;
  Track(conn_.Send(name, p), {if_none, own, refused, std::move(rows)});
}

void Batcher::Sql(const char* sql) {
  SendInserts();
  SendDeletes();
  if (!status_.ok()) return;
  Track(conn_.SendSql(sql), {nullptr, nullptr, StatusCode::kConflict, nullptr});
}

bool Batcher::checks_pending() const {
  return std::any_of(sent_.begin(), sent_.end(),
                     [](const Sent& st) { return st.if_none != nullptr && st.own == nullptr; });
}

Status Batcher::Flush() {
  SendInserts();
  SendDeletes();
  Status first = status_;
  status_ = Status::Ok();
  if (sent_.empty()) return first;
  Status s = conn_.Sync();
  for (const Sent& st : sent_) {
    uint64_t changed = 0;
    Status one = s.ok() ? conn_.Next(&changed, st.rows) : s;
    if (one.ok() && st.if_none != nullptr && changed == 0) {
      if (st.own != nullptr) {
        *st.own = Status(st.refused, st.if_none);
        continue;
      }
      one = Status(st.refused, st.if_none);
    }
    if (first.ok() && !one.ok()) first = one;
  }
  sent_.clear();
  if (s.ok()) s = ReadSync();
  return first.ok() ? s : first;
}

void Batcher::Deletes::Add(uint64_t id, std::optional<uint64_t> version, const char* if_none,
                           Status* own) {
  ids_.Int(static_cast<int64_t>(id));
  version ? versions_.Int(static_cast<int64_t>(*version)) : versions_.Null();
  entries_.push_back({static_cast<int64_t>(id), if_none, own});
  seen_.insert(id);
}

Params Batcher::Deletes::ToParams() const {
  Params p;
  p.Array(ids_).Array(versions_);
  return p;
}

Batcher::Rows Batcher::Deletes::Refusals() const {
  return [entries = entries_](const PGresult* r) {
    std::set<int64_t> deleted;
    for (int i = 0; i < PQntuples(r); ++i) deleted.insert(GetInt(r, i, 0));
    for (const Entry& e : entries) {
      if (e.if_none != nullptr && deleted.count(e.id) == 0) {
        *e.own = Status(StatusCode::kConflict, e.if_none);
      }
    }
  };
}

void Batcher::SendInserts() {
  if (!inserts_) return;
  Params p = inserts_->ToParams();
  inserts_.reset();
  if (!status_.ok()) return;
  Track(conn_.Send("insert", p), {nullptr, nullptr, StatusCode::kConflict, nullptr});
}

void Batcher::SendDeletes() {
  if (!deletes_) return;
  Deletes d = std::move(*deletes_);
  deletes_.reset();
  if (!status_.ok()) return;
  Track(conn_.Send("delete", d.ToParams()),
        {nullptr, nullptr, StatusCode::kConflict, d.Refusals()});
}

void Batcher::Track(Status s, Sent sent) {
  if (!s.ok()) {
    status_ = s;
    return;
  }
  sent_.push_back(std::move(sent));
  if (sent_.size() >= kPipelineDepth) status_ = Flush();
}

Status Batcher::ReadSync() {
  for (;;) {
    PgResult r(PQgetResult(conn_.get()));
    if (!r) {
      if (!conn_.ok()) return conn_.Error(nullptr, "pipeline");
      continue;
    }
    if (PQresultStatus(r.get()) == PGRES_PIPELINE_SYNC) return Status::Ok();
  }
}

}  // namespace delayd::store::pg
