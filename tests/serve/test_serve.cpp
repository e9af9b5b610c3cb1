// examples/serve: the image decoders, the batcher, and the HTTP server started in this process on an
// ephemeral port of 127.0.0.1 with a randomly initialized model saved to a temporary checkpoint. Bad input
// gets a 4xx JSON error and never stops the server; PGM, PNG and resized RGB PNG of the same pixels answer
// the same; concurrent (batched) answers equal single-image inference; metrics move; stop() answers the
// requests in flight. Timeouts here only guard against hangs.
#include <doctest/doctest.h>
#include <zlib.h>

#include <charconv>
#include <chrono>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../examples/serve/server.hpp"
#include "../io/io_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_serve_serve {

using namespace serve;
using namespace std::string_literals;  // "...\x00..."s keeps its zero bytes
using fashion_mnist::kClassNames;
using fashion_mnist::kImageSide;

namespace {

constexpr int64_t kPixels = kImageSide * kImageSide;

// A 28x28 8-bit image with a bright blob on a dark background, different for each seed.
std::vector<unsigned char> test_image(uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> centre(8, 20), noise(0, 40);
  const double cx = centre(gen), cy = centre(gen);
  std::vector<unsigned char> pixels(kPixels);
  for (int64_t y = 0; y < kImageSide; ++y)
    for (int64_t x = 0; x < kImageSide; ++x) {
      const double d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
      pixels[size_t(y * kImageSide + x)] = static_cast<unsigned char>(std::min(255.0, 230 * std::exp(-d2 / 40) + noise(gen)));
    }
  return pixels;
}

std::string png_of(const std::vector<unsigned char>& pixels) { return encode_png(pixels.data(), kImageSide, kImageSide, 1); }

// The same picture at twice the size, each pixel a 2x2 block, as RGB with R = G = B.
std::string rgb_png_twice_the_size(const std::vector<unsigned char>& gray) {
  const int64_t side = 2 * kImageSide;
  std::vector<unsigned char> rgb;
  for (int64_t y = 0; y < side; ++y)
    for (int64_t x = 0; x < side; ++x) rgb.insert(rgb.end(), 3, gray[size_t((y / 2) * kImageSide + x / 2)]);
  return encode_png(rgb.data(), uint32_t(side), uint32_t(side), 3);
}

// A PNG that declares width x height pixels and holds no image data: what a decompression bomb looks like
// to a decoder that trusts the header.
std::string png_declaring(uint32_t width, uint32_t height) {
  auto big_endian = [](uint32_t v) {
    return std::string{char(v >> 24), char(v >> 16 & 255), char(v >> 8 & 255), char(v & 255)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    const std::string body = type + data;
    const uint32_t crc = uint32_t(crc32(0, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size())));
    return big_endian(uint32_t(data.size())) + body + big_endian(crc);
  };
  const std::string ihdr = big_endian(width) + big_endian(height) + std::string{8, 0, 0, 0, 0};  // 8-bit gray
  return "\x89PNG\r\n\x1a\n" + chunk("IHDR", ihdr) + chunk("IEND", "");
}

// The answer's {"class": probability, ...} in its order; fails the test on anything else.
std::vector<std::pair<std::string, double>> parse_answer(const std::string& json) {
  std::vector<std::pair<std::string, double>> out;
  size_t pos = 0;
  auto expect = [&](char c) {
    while (pos < json.size() && json[pos] == ' ') ++pos;
    REQUIRE_MESSAGE((pos < json.size() && json[pos] == c), "expected '", c, "' at ", pos, " in ", json);
    ++pos;
  };
  expect('{');
  do {
    expect('"');
    const size_t end = json.find('"', pos);
    REQUIRE(end != std::string::npos);
    std::string name = json.substr(pos, end - pos);
    pos = end + 1;
    expect(':');
    while (pos < json.size() && json[pos] == ' ') ++pos;
    double value = 0;
    const auto [ptr, ec] = std::from_chars(json.data() + pos, json.data() + json.size(), value);
    REQUIRE_MESSAGE(ec == std::errc(), "expected a number at ", pos, " in ", json);
    pos = size_t(ptr - json.data());
    out.emplace_back(std::move(name), value);
  } while (pos < json.size() && json[pos] == ',' && ++pos);
  expect('}');
  return out;
}

// Probabilities in class order, from an answer.
std::vector<double> by_class(const std::string& json) {
  std::vector<double> p(kClassNames.size(), -1);
  for (const auto& [name, value] : parse_answer(json)) {
    const auto it = std::find(kClassNames.begin(), kClassNames.end(), name);
    REQUIRE_MESSAGE(it != kClassNames.end(), "unknown class ", name);
    p[size_t(it - kClassNames.begin())] = value;
  }
  return p;
}

size_t argmax(const std::vector<double>& p) { return size_t(std::max_element(p.begin(), p.end()) - p.begin()); }

// A randomly initialized model in a temporary checkpoint, as examples/fashion_mnist would write it. Its last
// layer's weights are scaled up so that the classes' probabilities lie apart (random logits are all near 0).
struct Checkpoint {
  kiln::test::ScratchDir dir;
  std::filesystem::path path = dir / "checkpoint.safetensors";
  Checkpoint() {
    kiln::manual_seed(2026);
    auto state = fashion_mnist::make_model()->state_dict();
    state.at("11.weight") = kiln::Tensor<float>(state.at("11.weight") * 40.0f);
    kiln::io::Checkpoint ckpt;
    ckpt.put("model", state).save(path);
  }
};
const Checkpoint& checkpoint() {
  static const Checkpoint c;
  return c;
}

// The reference: one image alone through a classifier of its own.
std::vector<double> single_image_probabilities(const std::string& body) {
  static Classifier classifier = Classifier::from_checkpoint(checkpoint().path, 1);
  const std::vector<float> input = model_input(decode_image(body, ImageLimits{}));
  kiln::Tensor<float> batch = kiln::empty<float>({1, 1, kImageSide, kImageSide});
  std::copy(input.begin(), input.end(), batch.data_ptr());
  const kiln::Tensor<float> p = classifier.probabilities(batch);
  return std::vector<double>(p.data_ptr(), p.data_ptr() + p.numel());
}

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) CHECK_MESSAGE(std::abs(got[k] - want[k]) <= 1e-5, kClassNames[k], ": ", got[k], " vs ", want[k]);
  CHECK(argmax(got) == argmax(want));
}

// ModelServer on 127.0.0.1 and a free port, listening on a thread of its own until destroyed.
class RunningServer {
 public:
  explicit RunningServer(ServerOptions options = test_options(), const std::filesystem::path& model = checkpoint().path)
      : server_(Classifier::from_checkpoint(model, 2), std::move(options)),
        port_(server_.bind()),
        thread_([this] { server_.listen(); }) {}
  ~RunningServer() {
    server_.stop();
    thread_.join();
  }

  static ServerOptions test_options() {
    ServerOptions o;
    o.port = 0;
    o.http_threads = 32;
    o.max_body_bytes = 64 * 1024;
    o.batching = {.max_batch = 16, .max_delay = std::chrono::milliseconds(5)};
    return o;
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(30);
    c.set_read_timeout(60);  // hang guards only
    c.set_write_timeout(60);
    return c;
  }
  ModelServer& server() { return server_; }

 private:
  ModelServer server_;
  int port_;
  std::thread thread_;
};

struct Answer {
  int status = 0;
  std::string body;
};
Answer post(httplib::Client& client, const std::string& body, const std::string& model = "fashion_mnist") {
  const httplib::Result r = client.Post(("/predictions/" + model).c_str(), body, "application/octet-stream");
  REQUIRE_MESSAGE(r, "no answer: ", httplib::to_string(r.error()));
  return {r->status, r->body};
}

// The value of a metric line "name value" in Prometheus text.
double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  REQUIRE_MESSAGE(at != std::string::npos, "no metric ", name);
  return std::stod(text.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("serve: PGM is read strictly") {
  const std::vector<unsigned char> pixels = test_image(1);
  const ImageLimits limits;
  const GrayImage image = decode_pgm(encode_pgm(pixels.data(), kImageSide, kImageSide), limits);
  REQUIRE(image.width == kImageSide);
  REQUIRE(image.height == kImageSide);
  for (size_t i = 0; i < pixels.size(); ++i) REQUIRE(image.pixels[i] == float(pixels[i]) / 255.0f);

  const GrayImage commented = decode_pgm("P5 # size next\n2 # width\n1\n65535\n\xff\xff\x80\x00"s, limits);
  CHECK(commented.pixels == std::vector<float>{1.0f, float(0x8000) / 65535.0f});

  auto refused = [&](const std::string& bytes, const std::string& message) {
    CHECK_THROWS_WITH_AS(decode_pgm(bytes, limits), doctest::Contains(message.c_str()), ImageError);
  };
  refused("P5\n2 2\n255\n\x01\x02\x03", "need 4 bytes after the header, got 3");
  refused("P5\n2 2\n255\n\x01\x02\x03\x04\x05", "need 4 bytes after the header, got 5");
  refused("P5\n2 1\n200\n\x01\xff", "sample 1 is 255, over maxval 200");
  refused("P5\n2 x\n255\n", "expected the height");
  refused("P5\n2 1\n255", "expected one whitespace byte after maxval");
  refused("P5\n99999999999999999999 1\n255\n", "the width is over 2048");
  refused("P5\n0 1\n255\n", "declares an empty image");
  refused("P5\n1 1\n0\n\x00"s, "maxval must be between 1 and 65535");
  CHECK_THROWS_AS(decode_pgm("P6\n1 1\n255\n\x00\x00\x00"s, limits), UnsupportedImageFormat);
}

TEST_CASE("serve: PNG of every color type becomes gray; bombs and truncated files are refused") {
  const std::vector<unsigned char> pixels = test_image(2);
  const ImageLimits limits;
  const GrayImage gray = decode_png(png_of(pixels), limits);
  REQUIRE(gray.width == kImageSide);
  for (size_t i = 0; i < pixels.size(); ++i) REQUIRE(gray.pixels[i] == float(pixels[i]) / 255.0f);

  // R = G = B gives the gray value itself; a 2x2 block averaged back is the same pixel.
  const GrayImage rgb = decode_png(rgb_png_twice_the_size(pixels), limits);
  REQUIRE(rgb.width == 2 * kImageSide);
  CHECK(resize_area(rgb, kImageSide, kImageSide).pixels == gray.pixels);

  CHECK_THROWS_WITH_AS(decode_png(png_declaring(100000, 100000), limits),
                       doctest::Contains("declares 100000x100000 pixels; the limit is 2048"), ImageError);
  const std::string png = png_of(pixels);
  for (size_t cut : {size_t(8), size_t(30), png.size() / 2, png.size() - 1})
    CHECK_THROWS_AS(decode_png(png.substr(0, cut), limits), ImageError);
  CHECK_THROWS_AS(decode_image("", limits), ImageError);
  CHECK_THROWS_AS(decode_image("GIF89a", limits), UnsupportedImageFormat);
}

TEST_CASE("serve: area resampling averages whole blocks and keeps a constant image constant") {
  const GrayImage two_by_two{2, 2, {0.0f, 0.5f, 1.0f, 0.25f}};
  CHECK(resize_area(two_by_two, 1, 1).pixels[0] == doctest::Approx(0.4375));
  const GrayImage constant{7, 3, std::vector<float>(21, 0.625f)};
  for (const float v : resize_area(constant, 28, 28).pixels) CHECK(v == doctest::Approx(0.625).epsilon(1e-6));
  for (const float v : resize_area(constant, 2, 5).pixels) CHECK(v == doctest::Approx(0.625).epsilon(1e-6));
}

TEST_CASE("serve: answers list every class, most probable first; a non-finite probability is an error") {
  std::vector<float> p(kClassNames.size(), 0.05f);
  p[3] = 0.3f;
  p[7] = 0.3f;  // a tie keeps the class order
  p[9] = 0.0f;
  const auto answer = parse_answer(json_probabilities(p));
  REQUIRE(answer.size() == kClassNames.size());
  CHECK(answer[0].first == kClassNames[3]);
  CHECK(answer[1].first == kClassNames[7]);
  CHECK(answer[2].first == kClassNames[0]);
  CHECK(answer.back().first == kClassNames[9]);
  p[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(json_probabilities(p), doctest::Contains("not finite"));
}

TEST_CASE("serve: the classifier, its BatchNorms folded into the convolutions, answers as the eval-mode model") {
  kiln::manual_seed(11);
  kiln::nn::Sequential net = fashion_mnist::make_model();
  auto state = net->state_dict();
  for (const char* norm : {"1", "5"}) {  // statistics and affine parameters far from the identity
    const std::string n = norm;
    const int64_t channels = state.at(n + ".weight").numel();
    state.at(n + ".running_mean") = kiln::Tensor<float>(kiln::randn({channels}) * 0.5f);
    state.at(n + ".running_var") = kiln::Tensor<float>(kiln::rand({channels}) * 2.0f + 0.5f);
    state.at(n + ".weight") = kiln::Tensor<float>(kiln::rand({channels}) + 0.5f);
    state.at(n + ".bias") = kiln::Tensor<float>(kiln::randn({channels}) * 0.1f);
  }
  state.at("11.weight") = kiln::Tensor<float>(state.at("11.weight") * 40.0f);
  net->load_state_dict(state);
  Classifier classifier(net, 1);
  const kiln::Tensor<float> images = kiln::randn({4, 1, kImageSide, kImageSide});
  kiln::InferenceMode inference;
  net->eval();
  const kiln::Tensor<float> want = kiln::softmax(net(images), 1), got = classifier.probabilities(images);
  CHECK(kiln::amax(kiln::abs(got - want)).item() <= 1e-5f);
  CHECK(kiln::all(kiln::argmax(got, 1) == kiln::argmax(want, 1)).item());
}

TEST_CASE("serve: a batch of 8 answers each item as single-image inference does") {
  Classifier classifier = Classifier::from_checkpoint(checkpoint().path, 2);
  std::vector<int64_t> sizes;
  // A delay no test waits for: the batch runs because 8 items are queued.
  Batcher batcher({1, kImageSide, kImageSide}, [&](const kiln::Tensor<float>& x) { return classifier.probabilities(x); },
                  {.max_batch = 8, .max_delay = std::chrono::hours(1)}, [&](int64_t n) { sizes.push_back(n); });
  std::vector<std::string> bodies;
  std::vector<std::future<std::vector<float>>> answers;
  for (uint32_t i = 0; i < 8; ++i) {
    bodies.push_back(png_of(test_image(100 + i)));
    answers.push_back(batcher.submit(model_input(decode_image(bodies.back(), ImageLimits{}))));
  }
  for (size_t i = 0; i < answers.size(); ++i) {
    REQUIRE(answers[i].wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    const std::vector<float> p = answers[i].get();
    check_close(std::vector<double>(p.begin(), p.end()), single_image_probabilities(bodies[i]));
  }
  CHECK(sizes == std::vector<int64_t>{8});
  CHECK_THROWS_AS(batcher.submit(std::vector<float>(3)), std::invalid_argument);
}

TEST_CASE("serve: bad requests get a 4xx JSON error and the server keeps serving") {
  RunningServer running;
  httplib::Client client = running.client();
  const std::string valid = png_of(test_image(3));
  const std::string truncated = valid.substr(0, valid.size() / 2);
  struct Case {
    std::string what;
    std::string body, model;
    int status;
    const char* message;
  };
  const Case cases[] = {
      {"empty body", "", "fashion_mnist", 400, "the request body is empty"},
      {"not an image", "hello, world", "fashion_mnist", 415, "neither a PNG nor a binary PGM"},
      {"truncated PNG", truncated, "fashion_mnist", 400, "PNG: "},
      {"bomb-sized PNG", png_declaring(1u << 30, 1u << 30), "fashion_mnist", 400, "the limit is 2048"},
      {"bad PGM", "P5\n28 28\n255\nshort", "fashion_mnist", 400, "PGM: "},
      {"unknown model", valid, "other", 404, R"(no model named \"other\")"},
      {"body over the limit", std::string(100 * 1024, 'x'), "fashion_mnist", 413, "over the limit of 65536 bytes"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const Answer a = post(client, c.body, c.model);
    CHECK(a.status == c.status);
    CHECK(a.body.starts_with("{\"error\": \""));
    CHECK_MESSAGE(a.body.find(c.message) != std::string::npos, a.body);
    // Each error leaves the server (and a new connection, after an error that closed this one) working.
    httplib::Client fresh = running.client();
    CHECK(post(fresh, valid).status == 200);
  }
  const httplib::Result missing = client.Get("/nothing");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(missing->body == "{\"error\": \"no such path: GET /nothing\"}");
  const Answer ok = post(client, valid);
  REQUIRE(ok.status == 200);
  CHECK(parse_answer(ok.body).size() == kClassNames.size());
}

TEST_CASE("serve: a model that answers NaN gets a 500 JSON error on every request, not a broken answer") {
  kiln::test::ScratchDir dir;
  auto state = fashion_mnist::make_model()->state_dict();
  state.at("11.bias") = kiln::full<float>(state.at("11.bias").shape(), std::numeric_limits<float>::quiet_NaN());
  kiln::io::Checkpoint().put("model", state).save(dir / "nan.safetensors");
  RunningServer running(RunningServer::test_options(), dir / "nan.safetensors");
  httplib::Client client = running.client();
  for (int i = 0; i < 2; ++i) {
    const Answer a = post(client, png_of(test_image(5)));
    CHECK(a.status == 500);
    CHECK(a.body == "{\"error\": \"the model answered a probability that is not finite\"}");
  }
}

TEST_CASE("serve: PGM, PNG and a 56x56 RGB PNG of the same pixels give the same answer, sorted") {
  RunningServer running;
  httplib::Client client = running.client();
  const std::vector<unsigned char> pixels = test_image(4);
  const Answer png = post(client, png_of(pixels));
  const Answer pgm = post(client, encode_pgm(pixels.data(), kImageSide, kImageSide));
  const Answer rgb = post(client, rgb_png_twice_the_size(pixels));
  REQUIRE(png.status == 200);
  REQUIRE(pgm.status == 200);
  REQUIRE(rgb.status == 200);
  CHECK(pgm.body == png.body);
  CHECK(rgb.body == png.body);
  const auto answer = parse_answer(png.body);
  REQUIRE(answer.size() == kClassNames.size());
  double total = 0;
  for (size_t i = 0; i < answer.size(); ++i) {
    total += answer[i].second;
    if (i > 0) CHECK(answer[i - 1].second >= answer[i].second);
  }
  CHECK(total == doctest::Approx(1).epsilon(1e-4));
  check_close(by_class(png.body), single_image_probabilities(png_of(pixels)));
}

TEST_CASE("serve: concurrent requests from several clients equal single-image inference; metrics move") {
  RunningServer running;
  httplib::Client probe = running.client();
  const httplib::Result ping = probe.Get("/ping");
  REQUIRE(ping);
  CHECK(ping->status == 200);
  CHECK(ping->body == "{\"status\": \"Healthy\"}");
  const httplib::Result before = probe.Get("/metrics");
  REQUIRE(before);

  constexpr int kClients = 16, kEach = 2;
  std::vector<std::vector<Answer>> answers(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      httplib::Client client = running.client();
      for (int i = 0; i < kEach; ++i) {
        const httplib::Result r = client.Post("/predictions/fashion_mnist", png_of(test_image(uint32_t(200 + c * kEach + i))),
                                              "image/png");
        answers[size_t(c)].push_back(r ? Answer{r->status, r->body} : Answer{-1, httplib::to_string(r.error())});
      }
    });
  for (std::thread& t : clients) t.join();
  for (int c = 0; c < kClients; ++c)
    for (int i = 0; i < kEach; ++i) {
      const Answer& a = answers[size_t(c)][size_t(i)];
      REQUIRE_MESSAGE(a.status == 200, a.body);
      check_close(by_class(a.body), single_image_probabilities(png_of(test_image(uint32_t(200 + c * kEach + i)))));
    }
  CHECK(post(probe, "not an image").status == 415);

  const httplib::Result after = probe.Get("/metrics");
  REQUIRE(after);
  const std::string& b = before->body;
  const std::string& a = after->body;
  constexpr double kPredictions = kClients * kEach + 1;
  // Requests: the predictions, the 415 and the first /metrics (answered after its text was made).
  CHECK(metric(a, "kiln_serve_requests_total") - metric(b, "kiln_serve_requests_total") == kPredictions + 1);
  CHECK(metric(a, "kiln_serve_request_duration_seconds_count") - metric(b, "kiln_serve_request_duration_seconds_count") ==
        kPredictions);
  CHECK(metric(a, "kiln_serve_batch_size_sum") - metric(b, "kiln_serve_batch_size_sum") == kClients * kEach);
  CHECK(metric(a, "kiln_serve_errors_total{code=\"415\"}") == 1);
  CHECK(metric(a, "kiln_serve_predictions_in_flight") == 0);
  CHECK(a.find("kiln_serve_request_duration_seconds_bucket{le=\"+Inf\"}") != std::string::npos);
  CHECK(a.find("# TYPE kiln_serve_batch_size histogram") != std::string::npos);
}

TEST_CASE("serve: stop() answers the requests in flight before listen() returns") {
  ServerOptions options = RunningServer::test_options();
  options.batching.max_delay = std::chrono::milliseconds(300);  // the requests wait in the batcher meanwhile
  auto running = std::make_unique<RunningServer>(options);
  constexpr int kClients = 3;
  std::vector<std::future<Answer>> answers;
  for (int c = 0; c < kClients; ++c)
    answers.push_back(std::async(std::launch::async, [&running, c] {
      httplib::Client client = running->client();
      return post(client, png_of(test_image(uint32_t(300 + c))));
    }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // a hang guard
  while (running->server().metrics().in_flight() < kClients && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(running->server().metrics().in_flight() == kClients);
  running.reset();  // stop() and join the listening thread
  for (auto& a : answers) CHECK(a.get().status == 200);
}

}  // namespace test_serve_serve
