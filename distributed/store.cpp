// The rendezvous stores. The TCP store's server answers every request at once (a missing key is
// an answer too), and clients poll: waits then need no server-side queues, and a client whose
// peer never arrives gives up on its own clock.
#include "distributed/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace ember::distributed {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(2);

enum class Command : uint8_t { Set = 1, Get = 2, Add = 3, Check = 4 };

// ---- framing: every field is a u32 length and its bytes -----------------------------------

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_field(int fd, const void* data, uint32_t n) {
  return write_all(fd, &n, sizeof n) && (n == 0 || write_all(fd, data, n));
}

bool read_field(int fd, std::vector<char>& out) {
  uint32_t n = 0;
  if (!read_all(fd, &n, sizeof n)) return false;
  if (n > (1u << 30)) return false;  // not a peer of ours
  out.resize(n);
  return n == 0 || read_all(fd, out.data(), n);
}

std::string sys_error() { return std::strerror(errno); }

// ---- the server -----------------------------------------------------------------------------

class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    EMBER_CHECK(rc == 0, "init_process_group: cannot resolve the store's address ", host, ":", port,
                ": ", gai_strerror(rc));
    std::string why = "no address";
    for (addrinfo* a = res; a; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
        listen_fd_ = fd;
        break;
      }
      why = sys_error();
      ::close(fd);
    }
    ::freeaddrinfo(res);
    EMBER_CHECK(listen_fd_ >= 0, "init_process_group: rank 0 cannot serve the store on ", host, ":",
                port, ": ", why, " (is another job using MASTER_PORT?)");
    EMBER_CHECK(::pipe2(wake_, O_CLOEXEC) == 0, "init_process_group: pipe: ", sys_error());
    thread_ = std::thread([this] { serve(); });
  }

  ~TcpStoreServer() {
    const char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

 private:
  // One thread polls the listening socket and every client: requests are small and rare (the
  // ranks meet once), so there is nothing to gain from a thread per client.
  void serve() {
    std::vector<int> clients;
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (int c : clients) fds.push_back({c, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[0].revents) break;
      std::vector<int> alive;
      for (size_t i = 2; i < fds.size(); ++i) {
        const int c = fds[i].fd;
        if (fds[i].revents == 0 || answer(c)) {
          alive.push_back(c);
        } else {
          ::close(c);
        }
      }
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          const int one = 1;
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          alive.push_back(c);
        }
      }
      clients = std::move(alive);
    }
    for (int c : clients) ::close(c);
  }

  // Reads one request from `fd` and answers it; false when the client is gone or garbled.
  bool answer(int fd) {
    uint8_t cmd = 0;
    std::vector<char> key;
    if (!read_all(fd, &cmd, 1) || !read_field(fd, key)) return false;
    const std::string k(key.begin(), key.end());
    switch (static_cast<Command>(cmd)) {
      case Command::Set: {
        std::vector<char> value;
        if (!read_field(fd, value)) return false;
        data_[k] = std::move(value);
        const uint8_t ok = 1;
        return write_all(fd, &ok, 1);
      }
      case Command::Get: {
        auto it = data_.find(k);
        const uint8_t found = it != data_.end();
        if (!write_all(fd, &found, 1)) return false;
        return !found || write_field(fd, it->second.data(), it->second.size());
      }
      case Command::Add: {
        int64_t delta = 0;
        if (!read_all(fd, &delta, sizeof delta)) return false;
        int64_t sum = delta;
        auto it = data_.find(k);
        if (it != data_.end()) sum += std::stoll(std::string(it->second.begin(), it->second.end()));
        const std::string s = std::to_string(sum);
        data_[k] = std::vector<char>(s.begin(), s.end());
        return write_all(fd, &sum, sizeof sum);
      }
      case Command::Check: {
        const uint8_t found = data_.count(k) != 0;
        return write_all(fd, &found, 1);
      }
    }
    return false;
  }

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::map<std::string, std::vector<char>> data_;
  std::thread thread_;
};

// ---- the client -----------------------------------------------------------------------------

class TcpStore final : public Store {
 public:
  TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout)
      : Store(timeout), where_(host + ":" + std::to_string(port)) {
    if (is_server) server_ = std::make_unique<TcpStoreServer>(host, port);
    connect(host, port);
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    std::lock_guard lock(mu_);
    request(Command::Set, key);
    ok(write_field(fd_, value.data(), static_cast<uint32_t>(value.size())), "set");
    uint8_t ack = 0;
    ok(read_all(fd_, &ack, 1), "set");
  }

  std::vector<char> get(const std::string& key) override {
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      {
        std::lock_guard lock(mu_);
        request(Command::Get, key);
        uint8_t found = 0;
        ok(read_all(fd_, &found, 1), "get");
        if (found) {
          std::vector<char> value;
          ok(read_field(fd_, value), "get");
          return value;
        }
      }
      waited_out(deadline, key);
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard lock(mu_);
    request(Command::Add, key);
    ok(write_all(fd_, &delta, sizeof delta), "add");
    int64_t sum = 0;
    ok(read_all(fd_, &sum, sizeof sum), "add");
    return sum;
  }

  void wait(const std::vector<std::string>& keys) override {
    const auto deadline = Clock::now() + timeout_;
    for (const std::string& key : keys) {
      for (;;) {
        uint8_t found = 0;
        {
          std::lock_guard lock(mu_);
          request(Command::Check, key);
          ok(read_all(fd_, &found, 1), "wait");
        }
        if (found) break;
        waited_out(deadline, key);
        std::this_thread::sleep_for(kPollInterval);
      }
    }
  }

 private:
  void connect(const std::string& host, int port) {
    const auto deadline = Clock::now() + timeout_;
    std::string why;
    for (;;) {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      EMBER_CHECK(rc == 0, "init_process_group: cannot resolve the store's address ", where_, ": ",
                  gai_strerror(rc));
      for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          fd_ = fd;
        } else {
          why = sys_error();
          ::close(fd);
        }
      }
      ::freeaddrinfo(res);
      if (fd_ >= 0) break;
      EMBER_CHECK(Clock::now() < deadline, "init_process_group: no store at ", where_, " after ",
                  timeout_.count(), " ms (", why,
                  "); rank 0 serves it: is it running, with the same MASTER_ADDR and MASTER_PORT?");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // A server that stops answering (rank 0 died) must not hang a client.
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout_.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout_.count() % 1000) * 1000);
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  void request(Command cmd, const std::string& key) {
    const uint8_t c = static_cast<uint8_t>(cmd);
    ok(write_all(fd_, &c, 1) && write_field(fd_, key.data(), static_cast<uint32_t>(key.size())),
       "request");
  }

  void ok(bool sent, const char* what) const {
    EMBER_CHECK(sent, "process group store: lost the store at ", where_, " during ", what,
                " (rank 0, which serves it, may have exited)");
  }

  void waited_out(Clock::time_point deadline, const std::string& key) const {
    EMBER_CHECK(Clock::now() < deadline, "process group store: key '", key, "' was not set within ",
                timeout_.count(), " ms (a rank did not arrive)");
  }

  std::string where_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mu_;
  int fd_ = -1;
};

// ---- the file store -------------------------------------------------------------------------

class FileStore final : public Store {
 public:
  FileStore(const std::string& path, std::chrono::milliseconds timeout)
      : Store(timeout), dir_(path) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    EMBER_CHECK(!ec && std::filesystem::is_directory(dir_), "init_process_group: cannot use ", path,
                " as the store's directory: ", ec.message());
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    // Write aside and rename: a reader sees the whole value or nothing.
    const std::filesystem::path file = file_of(key);
    static std::atomic<uint64_t> writes{0};  // per process: several stores may share a directory
    const std::filesystem::path tmp =
        file.string() + ".tmp" + std::to_string(::getpid()) + "." + std::to_string(writes++);
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      EMBER_CHECK(out.good(), "process group store: cannot write ", tmp.string());
    }
    std::error_code ec;
    std::filesystem::rename(tmp, file, ec);
    EMBER_CHECK(!ec, "process group store: cannot write ", file.string(), ": ", ec.message());
  }

  std::vector<char> get(const std::string& key) override {
    wait({key});
    std::ifstream in(file_of(key), std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  }

  int64_t add(const std::string& key, int64_t delta) override {
    // A counter file under an exclusive lock: every rank's increment lands once.
    const std::string file = file_of(key).string() + ".counter";
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EMBER_CHECK(fd >= 0, "process group store: cannot open ", file, ": ", sys_error());
    ::flock(fd, LOCK_EX);
    int64_t sum = 0;
    const ssize_t r = ::pread(fd, &sum, sizeof sum, 0);
    if (r != static_cast<ssize_t>(sizeof sum)) sum = 0;
    sum += delta;
    const bool wrote = ::pwrite(fd, &sum, sizeof sum, 0) == static_cast<ssize_t>(sizeof sum);
    // The key's readable value, under the lock: a later sum never lands before an earlier one.
    const std::string s = std::to_string(sum);
    std::string why;
    try {
      set(key, std::vector<char>(s.begin(), s.end()));
    } catch (const Error& e) {
      why = e.what();
    }
    ::flock(fd, LOCK_UN);
    ::close(fd);
    EMBER_CHECK(wrote && why.empty(), "process group store: cannot write ", file, " ", why);
    return sum;
  }

  void wait(const std::vector<std::string>& keys) override {
    const auto deadline = Clock::now() + timeout_;
    for (const std::string& key : keys) {
      while (!std::filesystem::exists(file_of(key))) {
        EMBER_CHECK(Clock::now() < deadline, "process group store: key '", key,
                    "' was not set within ", timeout_.count(), " ms in ", dir_.string(),
                    " (a rank did not arrive)");
        std::this_thread::sleep_for(kPollInterval);
      }
    }
  }

 private:
  // Keys may hold any byte: hex keeps file names portable.
  std::filesystem::path file_of(const std::string& key) const {
    static const char* digits = "0123456789abcdef";
    std::string name = "k";
    for (unsigned char c : key) {
      name += digits[c >> 4];
      name += digits[c & 15];
    }
    return dir_ / name;
  }

  std::filesystem::path dir_;
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool is_server,
                                      std::chrono::milliseconds timeout) {
  EMBER_CHECK(port > 0 && port < 65536, "init_process_group: MASTER_PORT must be in 1..65535, got ",
              port);
  return std::make_unique<TcpStore>(host, port, is_server, timeout);
}

std::unique_ptr<Store> make_file_store(const std::string& path, std::chrono::milliseconds timeout) {
  return std::make_unique<FileStore>(path, timeout);
}

}  // namespace ember::distributed
