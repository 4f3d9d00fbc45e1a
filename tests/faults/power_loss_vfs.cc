// A power-loss SQLite VFS, in the manner of SQLite's own crash tests: it
// wraps the default VFS and keeps every write in memory until the file is
// synced, so what reached the real file is exactly what was synced. Kill
// the process and the unsynced writes are gone, as after a power cut,
// whereas a plain kill -9 leaves them to the operating system's page cache.
//
// Loaded into delayd with LD_PRELOAD: a constructor registers it as the
// default VFS, so delayd needs no change and no flag. Tests of the shim
// itself link it and call PowerLossVfsCrash().
//
// Deviations from a real disk, all on the safe side for the test: a file's
// creation and truncation are durable at once; no partial (torn) write of a
// page ever reaches the file. Memory-mapped reads are refused so that every
// read sees the pending writes.
#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <vector>

namespace {

struct Write {
  sqlite3_int64 offset;
  std::string data;
};

// The unsynced writes of one file, shared by every handle open on it as the
// page cache is: the store's reader connection sees what its writer wrote.
struct Pending {
  std::vector<Write> writes;  // in order; later writes win
  int handles = 0;
};

struct File {
  sqlite3_file base;  // must be first: SQLite hands us this pointer
  sqlite3_file* real;
  std::string name;
  std::vector<Write>* pending;  // &g_pending[name].writes
};

sqlite3_vfs* g_real = nullptr;
std::mutex g_mu;  // guards g_pending, g_files, g_dead and every pending list
std::map<std::string, Pending>* g_pending = nullptr;
std::set<File*>* g_files = nullptr;
uint64_t g_temp_files = 0;
bool g_dead = false;  // the power is out: nothing more reaches a file

int Close(sqlite3_file* f) {
  File* p = reinterpret_cast<File*>(f);
  {
    std::lock_guard lock(g_mu);
    // A close does not sync: the writes stay in the page cache, so a
    // process that goes on sees them. The last handle writes them to the
    // file, without a sync, and forgets them.
    Pending& shared = (*g_pending)[p->name];
    if (--shared.handles == 0) {
      for (const Write& w : shared.writes) {
        if (g_dead) break;
        if (w.data.empty()) continue;
        p->real->pMethods->xWrite(p->real, w.data.data(), static_cast<int>(w.data.size()),
                                  w.offset);
      }
      g_pending->erase(p->name);
    }
    g_files->erase(p);
    using std::string;
    p->name.~string();
  }
  return p->real->pMethods->xClose(p->real);
}

int Read(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  File* p = reinterpret_cast<File*>(f);
  // The real read and the overlay of pending writes are one step: a sync on
  // another handle (another thread) moves pending writes into the file and
  // forgets them, and between the two a read would see neither.
  std::lock_guard lock(g_mu);
  int rc = p->real->pMethods->xRead(p->real, buf, n, off);
  if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) return rc;
  sqlite3_int64 end_read = off;  // how far real or pending data reaches
  if (rc == SQLITE_OK) end_read = off + n;
  if (rc == SQLITE_IOERR_SHORT_READ) {
    // SQLite zero-fills the rest; find how much was real by the file size.
    sqlite3_int64 size = 0;
    p->real->pMethods->xFileSize(p->real, &size);
    end_read = std::clamp<sqlite3_int64>(size, off, off + n);
  }
  for (const Write& w : *p->pending) {
    const sqlite3_int64 from = std::max(off, w.offset);
    const sqlite3_int64 to = std::min<sqlite3_int64>(off + n, w.offset + w.data.size());
    if (from >= to) continue;
    std::memcpy(static_cast<char*>(buf) + (from - off), w.data.data() + (from - w.offset),
                static_cast<size_t>(to - from));
    end_read = std::max(end_read, to);
  }
  if (end_read < off + n) {
    std::memset(static_cast<char*>(buf) + (end_read - off), 0,
                static_cast<size_t>(off + n - end_read));
    return SQLITE_IOERR_SHORT_READ;
  }
  return SQLITE_OK;
}

int WriteFn(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  File* p = reinterpret_cast<File*>(f);
  std::lock_guard lock(g_mu);
  if (g_dead) return SQLITE_OK;
  p->pending->push_back({off, std::string(static_cast<const char*>(buf), static_cast<size_t>(n))});
  return SQLITE_OK;
}

int Truncate(sqlite3_file* f, sqlite3_int64 size) {
  File* p = reinterpret_cast<File*>(f);
  std::lock_guard lock(g_mu);
  if (g_dead) return SQLITE_OK;
  for (Write& w : *p->pending) {
    if (w.offset >= size) {
      w.data.clear();
    } else if (w.offset + static_cast<sqlite3_int64>(w.data.size()) > size) {
      w.data.resize(static_cast<size_t>(size - w.offset));
    }
  }
  return p->real->pMethods->xTruncate(p->real, size);
}

int Sync(sqlite3_file* f, int flags) {
  File* p = reinterpret_cast<File*>(f);
  {
    std::lock_guard lock(g_mu);
    if (g_dead) return SQLITE_OK;
    for (const Write& w : *p->pending) {
      if (w.data.empty()) continue;
      int rc = p->real->pMethods->xWrite(p->real, w.data.data(), static_cast<int>(w.data.size()),
                                         w.offset);
      if (rc != SQLITE_OK) return rc;
    }
    p->pending->clear();
  }
  return p->real->pMethods->xSync(p->real, flags);
}

int FileSize(sqlite3_file* f, sqlite3_int64* size) {
  File* p = reinterpret_cast<File*>(f);
  std::lock_guard lock(g_mu);  // as in Read: the file and its pending writes at once
  int rc = p->real->pMethods->xFileSize(p->real, size);
  if (rc != SQLITE_OK) return rc;
  for (const Write& w : *p->pending) {
    if (!w.data.empty()) *size = std::max<sqlite3_int64>(*size, w.offset + w.data.size());
  }
  return SQLITE_OK;
}

int Lock(sqlite3_file* f, int l) {
  File* p = reinterpret_cast<File*>(f);
  return p->real->pMethods->xLock(p->real, l);
}
int Unlock(sqlite3_file* f, int l) {
  File* p = reinterpret_cast<File*>(f);
  return p->real->pMethods->xUnlock(p->real, l);
}
int CheckReservedLock(sqlite3_file* f, int* out) {
  File* p = reinterpret_cast<File*>(f);
  return p->real->pMethods->xCheckReservedLock(p->real, out);
}
int FileControl(sqlite3_file* f, int op, void* arg) {
  File* p = reinterpret_cast<File*>(f);
  if (op == SQLITE_FCNTL_MMAP_SIZE) {
    *static_cast<sqlite3_int64*>(arg) = 0;  // no memory-mapped reads
    return SQLITE_OK;
  }
  return p->real->pMethods->xFileControl(p->real, op, arg);
}
int SectorSize(sqlite3_file* f) {
  File* p = reinterpret_cast<File*>(f);
  return p->real->pMethods->xSectorSize(p->real);
}
int DeviceCharacteristics(sqlite3_file* f) {
  File* p = reinterpret_cast<File*>(f);
  return p->real->pMethods->xDeviceCharacteristics(p->real);
}
int ShmMap(sqlite3_file* f, int region, int size, int extend, void volatile** out) {
  File* p = reinterpret_cast<File*>(f);
  return p->real->pMethods->xShmMap(p->real, region, size, extend, out);
}
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  File* p = reinterpret_cast<File*>(f);
  return p->real->pMethods->xShmLock(p->real, offset, n, flags);
}
void ShmBarrier(sqlite3_file* f) {
  File* p = reinterpret_cast<File*>(f);
  p->real->pMethods->xShmBarrier(p->real);
}
int ShmUnmap(sqlite3_file* f, int del) {
  File* p = reinterpret_cast<File*>(f);
  return p->real->pMethods->xShmUnmap(p->real, del);
}
int Fetch(sqlite3_file*, sqlite3_int64, int, void** out) {
  *out = nullptr;  // read through xRead instead
  return SQLITE_OK;
}
int Unfetch(sqlite3_file*, sqlite3_int64, void*) { return SQLITE_OK; }

const sqlite3_io_methods kMethods = {
    3,
    Close,
    Read,
    WriteFn,
    Truncate,
    Sync,
    FileSize,
    Lock,
    Unlock,
    CheckReservedLock,
    FileControl,
    SectorSize,
    DeviceCharacteristics,
    ShmMap,
    ShmLock,
    ShmBarrier,
    ShmUnmap,
    Fetch,
    Unfetch,
};

int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  File* p = reinterpret_cast<File*>(f);
  p->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(f) + sizeof(File));
  p->base.pMethods = nullptr;
  int rc = g_real->xOpen(g_real, name, p->real, flags, out_flags);
  if (rc != SQLITE_OK) return rc;
  (void)vfs;
  {
    std::lock_guard lock(g_mu);
    // Temporary files have no name: each is its own.
    new (&p->name) std::string(name ? std::string(name) : "temp:" + std::to_string(++g_temp_files));
    Pending& shared = (*g_pending)[p->name];
    ++shared.handles;
    p->pending = &shared.writes;
    g_files->insert(p);
  }
  p->base.pMethods = &kMethods;
  return SQLITE_OK;
}

int Delete(sqlite3_vfs*, const char* name, int sync_dir) {
  {
    std::lock_guard lock(g_mu);
    if (g_dead) return SQLITE_OK;
  }
  return g_real->xDelete(g_real, name, sync_dir);
}
int Access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return g_real->xAccess(g_real, name, flags, out);
}
int FullPathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return g_real->xFullPathname(g_real, name, n, out);
}
void* DlOpen(sqlite3_vfs*, const char* name) { return g_real->xDlOpen(g_real, name); }
void DlError(sqlite3_vfs*, int n, char* out) { g_real->xDlError(g_real, n, out); }
void (*DlSym(sqlite3_vfs*, void* h, const char* sym))(void) {
  return g_real->xDlSym(g_real, h, sym);
}
void DlClose(sqlite3_vfs*, void* h) { g_real->xDlClose(g_real, h); }
int Randomness(sqlite3_vfs*, int n, char* out) { return g_real->xRandomness(g_real, n, out); }
int Sleep(sqlite3_vfs*, int us) { return g_real->xSleep(g_real, us); }
int CurrentTime(sqlite3_vfs*, double* out) { return g_real->xCurrentTime(g_real, out); }
int GetLastError(sqlite3_vfs*, int n, char* out) { return g_real->xGetLastError(g_real, n, out); }
int CurrentTimeInt64(sqlite3_vfs*, sqlite3_int64* out) {
  return g_real->xCurrentTimeInt64(g_real, out);
}

sqlite3_vfs g_vfs;

}  // namespace

// Registers the VFS as the default; safe to call more than once.
extern "C" int PowerLossVfsRegister() {
  static int rc = [] {
    g_real = sqlite3_vfs_find(nullptr);
    if (g_real == nullptr) return SQLITE_ERROR;
    g_files = new std::set<File*>();
    g_pending = new std::map<std::string, Pending>();
    g_vfs = sqlite3_vfs{};
    g_vfs.iVersion = 2;
    g_vfs.szOsFile = static_cast<int>(sizeof(File)) + g_real->szOsFile;
    g_vfs.mxPathname = g_real->mxPathname;
    g_vfs.zName = "powerloss";
    g_vfs.xOpen = Open;
    g_vfs.xDelete = Delete;
    g_vfs.xAccess = Access;
    g_vfs.xFullPathname = FullPathname;
    g_vfs.xDlOpen = DlOpen;
    g_vfs.xDlError = DlError;
    g_vfs.xDlSym = DlSym;
    g_vfs.xDlClose = DlClose;
    g_vfs.xRandomness = Randomness;
    g_vfs.xSleep = Sleep;
    g_vfs.xCurrentTime = CurrentTime;
    g_vfs.xGetLastError = GetLastError;
    g_vfs.xCurrentTimeInt64 = CurrentTimeInt64;
    return sqlite3_vfs_register(&g_vfs, 1);
  }();
  return rc;
}

// The power goes out: every write not yet synced is thrown away, in every
// open file, and nothing more is written or deleted until PowerLossVfsRevive
// (so the connections can be closed, as if the process had died).
extern "C" void PowerLossVfsCrash() {
  std::lock_guard lock(g_mu);
  if (g_files == nullptr) return;
  for (File* f : *g_files) f->pending->clear();
  g_dead = true;
}

// The power is back: files opened from now on work normally.
extern "C" void PowerLossVfsRevive() {
  std::lock_guard lock(g_mu);
  g_dead = false;
}

#ifdef POWER_LOSS_VFS_PRELOAD
#include <cstdio>
__attribute__((constructor)) static void RegisterAtLoad() {
  // The test looks for this line, so that a shim that failed to load does
  // not pass for one that lost nothing.
  if (PowerLossVfsRegister() == SQLITE_OK) std::fputs("power-loss VFS in use\n", stderr);
}
#endif
