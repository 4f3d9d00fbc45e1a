// ThreadSanitizer's suppressions for every binary (delayd, its tests),
// linked into each by the TSan build (common/CMakeLists.txt). Debian's
// gRPC, abseil, protobuf and librdkafka are not built for TSan and
// synchronise their threads through code TSan cannot see (abseil's
// futex-based mutex; librdkafka's atomic reference counts on the buffers it
// hands between its threads): it reports races inside them that are not
// there (hundreds in one run of grpc_push_test). delayd's own hand-offs
// with those libraries' threads go through mutexes TSan sees; the price is
// that a race of ours with one of their frames on its stack is hidden too.
// (brokers/c11_threads_tsan.h makes librdkafka's threads known to TSan.)
// Debian's OpenSSL is not built for TSan either: gRPC's TLS listener
// (--tls-cert with --grpc) builds its SSL_CTX on the loop thread and uses it
// from its own threads after a hand-off through abseil's mutex, which TSan
// reports as races inside libssl and libcrypto (SSL_new, OPENSSL_sk_dup).
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_suppressions() {
  return "race:libgrpc.so\n"
         "race:libgrpc++.so\n"
         "race:libgpr.so\n"
         "race:libabsl_\n"
         "race:libprotobuf.so\n"
         "race:libupb.so\n"
         "race:librdkafka.so\n"
         "race:libssl.so.3\n"
         "race:libcrypto.so.3\n"
         "called_from_lib:libgrpc.so\n"
         "called_from_lib:libgrpc++.so\n"
         "called_from_lib:libgpr.so\n"
         "called_from_lib:libprotobuf.so\n";
}
#endif
