/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * proxy-listen: the egress proxy core (proxy/proxy.h) outside slated, on a 127.0.0.1 TCP
 * listener, one thread per connection, for host-side tests (tests/integration/proxy.sh) and the
 * benchmark (bench/egress-proxy). Everything slated would take from a workspace comes from files:
 *
 *   --state DIR          the install directory: the egress CA is created there (egress-ca.crt)
 *   --secrets FILE       [{"key":K, "kind":"github", "hosts":[...], "value":"REAL"}...] (and
 *                        "body": true, "query": "PARAM", "allow_plain_http": true as secret
 *                        set's --body, --query, --allow-plain-http); the
 *                        placeholders are derived as slated derives them, from --salt-hex (or a
 *                        fixed test salt), and written to --placeholders FILE as {K: "PH"...}
 *                        (an aws secret: {K: ["ID-PH", "SECRET-PH"]})
 *   --policy FILE        egress.json, read again for every connection (absent: allow-all)
 *   --events FILE        JSON lines: every audit event, and {"type":"compromised",...} from the
 *                        leak hook (what slated turns into a compromised workspace)
 *   --ca-file, --connect-to   the proxy's test-only upstream settings
 *   --port N             (0: any) and --port-file FILE gets the port chosen
 *   --workspace NAME     the workspace name the connections belong to (default "test")
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proxy/policy.h"
#include "proxy/proxy.h"
#include "secrets/install.h"
#include "secrets/secrets.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

#define THREAD_STACK (256u * 1024u)

static struct secret_set *secrets;
static const char *policy_file, *events_file, *workspace = "test";
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static int events_fd = -1;

static void event(struct json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	size_t n;
	char *line;

	if (events_fd < 0 || !s)
		return;
	n = strlen(s);
	line = malloc(n + 1);
	if (!line)
		return;
	memcpy(line, s, n);
	line[n] = '\n';
	pthread_mutex_lock(&events_lock);
	(void)fs_write_all(events_fd, line, n + 1);
	pthread_mutex_unlock(&events_lock);
	free(line);
}

static int hook_load(void *userdata, const char *ws, struct secret_set **ret_secrets,
                     struct egress_policy **ret_policy, char *why, size_t why_len)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	(void)userdata;
	(void)ws;
	*ret_secrets = secrets;
	if (!policy_file)
		return 0;
	r = fs_read_file_at(AT_FDCWD, policy_file, EGRESS_MAX_FILE, &b);
	if (r == -ENOENT)
		return 0;
	if (r >= 0)
		r = egress_policy_parse((const char *)buf_ptr(b), buf_len(b), ret_policy);
	if (r < 0)
		(void)snprintf(why, why_len, "bad policy file");
	return r;
}

static void hook_release(void *userdata, struct secret_set *s)
{
	(void)userdata;
	(void)s; /* shared by every connection, freed at exit */
}

static void hook_leak(void *userdata, const struct proxy_leak *l)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();

	(void)userdata;
	if (!o || json_add_string(o, "type", "compromised") < 0 ||
	    json_add_string(o, "workspace", l->workspace) < 0 ||
	    json_add_string(o, "host", l->host) < 0 ||
	    json_add_string(o, "secret", l->secret) < 0 ||
	    json_add_string(o, "where", l->where) < 0)
		return;
	event(o);
}

static void hook_audit(void *userdata, const char *ws, const char *type, struct json_object *ev)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();

	(void)userdata;
	(void)ws;
	if (!o || json_add_string(o, "type", type) < 0)
		return;
	json_object_object_foreach (ev, k, v)
		if (json_add(o, k, json_object_get(v)) < 0)
			return;
	event(o);
}

static int load_secrets(const char *file, const unsigned char *salt, const char *ph_file)
{
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_json_ struct json_object *arr = NULL, *phs = json_object_new_object();
	_cleanup_free_ char *out = NULL;
	struct slate_error err = {0};
	int r;

	secrets = secret_set_new();
	if (!secrets || !phs)
		return -ENOMEM;
	if (!file)
		return 0;
	r = fs_read_file_at(AT_FDCWD, file, 1u << 20, &b);
	if (r < 0)
		return r;
	r = json_parse_bounded((const char *)buf_ptr(b), buf_len(b), 1u << 20, &arr);
	if (r < 0 || !json_object_is_type(arr, json_type_array))
		return -EINVAL;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *e = json_object_array_get_idx(arr, i), *hosts = NULL;
		const char *key = NULL, *kind = "generic", *value = NULL;
		const char *hv[32];
		struct secret_spec spec = {0};
		struct secret *s = NULL;
		size_t nh = 0;

		if (json_get_string(e, "key", &key) < 0 || json_get_string(e, "value", &value) < 0)
			return -EINVAL;
		(void)json_get_string(e, "kind", &kind);
		(void)json_get_array(e, "hosts", &hosts);
		(void)json_get_bool(e, "body", &spec.body);
		(void)json_get_string(e, "query", &spec.query);
		(void)json_get_bool(e, "allow_plain_http", &spec.plain_http);
		for (size_t j = 0; hosts && j < json_object_array_length(hosts) && nh < 32; j++)
			hv[nh++] = json_object_get_string(json_object_array_get_idx(hosts, j));
		spec.key = key;
		if (secret_kind_from_string(kind, &spec.kind) < 0)
			return -EINVAL;
		spec.hosts = hv;
		spec.n_hosts = nh;
		spec.value = value;
		spec.value_len = strlen(value);
		r = secret_new(&spec, salt, &s, &err);
		if (r < 0) {
			fprintf(stderr, "proxy-listen: secret %s: %s\n", key,
			        slate_error_text(&err));
			return r;
		}
		if (s->n_values == 1)
			r = json_add_string(phs, key, s->values[0].placeholder);
		else {
			struct json_object *a = json_object_new_array();
			for (size_t j = 0; a && j < s->n_values; j++)
				(void)json_object_array_add(
				        a, json_object_new_string(s->values[j].placeholder));
			r = json_add(phs, key, a);
		}
		if (r < 0 || (r = secret_set_put(secrets, s, NULL)) < 0) {
			secret_free(s);
			return r;
		}
	}
	if (ph_file) {
		r = json_to_string_dup(phs, true, &out);
		if (r >= 0)
			r = fs_write_atomic_at(AT_FDCWD, ph_file, out, strlen(out), 0644);
		if (r < 0)
			return r;
	}
	return 0;
}

struct job {
	struct proxy *p;
	int fd;
};

static void *serve_thread(void *arg)
{
	struct job *j = arg;

	proxy_serve(j->p, j->fd, workspace);
	(void)close(j->fd);
	free(j);
	return NULL;
}

int main(int argc, char **argv)
{
	enum {
		O_STATE = 1,
		O_SECRETS,
		O_POLICY,
		O_EVENTS,
		O_CA,
		O_CONNECT,
		O_PORT,
		O_PORTFILE,
		O_WS,
		O_PH,
		O_SALT
	};
	static const struct option opts[] = {
	        {"state", required_argument, NULL, O_STATE},
	        {"secrets", required_argument, NULL, O_SECRETS},
	        {"policy", required_argument, NULL, O_POLICY},
	        {"events", required_argument, NULL, O_EVENTS},
	        {"ca-file", required_argument, NULL, O_CA},
	        {"connect-to", required_argument, NULL, O_CONNECT},
	        {"port", required_argument, NULL, O_PORT},
	        {"port-file", required_argument, NULL, O_PORTFILE},
	        {"workspace", required_argument, NULL, O_WS},
	        {"placeholders", required_argument, NULL, O_PH},
	        {"salt-hex", required_argument, NULL, O_SALT},
	        {},
	};
	const char *state = NULL, *secrets_file = NULL, *port_file = NULL, *ph_file = NULL;
	unsigned char salt[INSTALL_SALT_LEN];
	struct proxy_config cfg = {0};
	struct proxy_hooks hooks = {
	        .load = hook_load, .release = hook_release, .leak = hook_leak, .audit = hook_audit};
	struct proxy *p = NULL;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	pthread_attr_t attr;
	int c, r, lfd, one = 1, dfd;

	memset(salt, 0x5a, sizeof(salt));
	while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0) {
		switch (c) {
		case O_STATE:
			state = optarg;
			break;
		case O_SECRETS:
			secrets_file = optarg;
			break;
		case O_POLICY:
			policy_file = optarg;
			break;
		case O_EVENTS:
			events_file = optarg;
			break;
		case O_CA:
			cfg.extra_ca_file = optarg;
			break;
		case O_CONNECT:
			cfg.connect_to = optarg;
			break;
		case O_PORT:
			sa.sin_port = htons((uint16_t)atoi(optarg));
			break;
		case O_PORTFILE:
			port_file = optarg;
			break;
		case O_WS:
			workspace = optarg;
			break;
		case O_PH:
			ph_file = optarg;
			break;
		case O_SALT:
			if (strlen(optarg) != 2 * sizeof(salt))
				return fprintf(stderr,
				               "proxy-listen: --salt-hex wants 64 digits\n"),
				       2;
			for (size_t i = 0; i < sizeof(salt); i++)
				if (sscanf(optarg + 2 * i, "%2hhx", &salt[i]) != 1)
					return 2;
			break;
		default:
			fprintf(stderr, "usage: proxy-listen --state DIR [--secrets FILE] "
			                "[--placeholders FILE] [--policy FILE] [--events FILE] "
			                "[--ca-file PEM] [--connect-to H:P:A:P] [--port N] "
			                "[--port-file FILE] [--workspace NAME] [--salt-hex HEX]\n");
			return 2;
		}
	}
	if (!state)
		return fprintf(stderr, "proxy-listen: --state DIR is required\n"), 2;
	log_open("proxy-listen", LOG_TARGET_STDERR);
	(void)signal(SIGPIPE, SIG_IGN);
	if (fs_mkdir_p(state, 0700) < 0 ||
	    (dfd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return fprintf(stderr, "proxy-listen: %s: %s\n", state, strerror(errno)), 1;
	if (events_file) {
		events_fd = open(events_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (events_fd < 0)
			return fprintf(stderr, "proxy-listen: %s: %s\n", events_file,
			               strerror(errno)),
			       1;
	}
	r = load_secrets(secrets_file, salt, ph_file);
	if (r < 0)
		return fprintf(stderr, "proxy-listen: secrets: %s\n", strerror(-r)), 1;
	cfg.ca_dirfd = dfd;
	r = proxy_new(&cfg, &hooks, &p);
	if (r < 0)
		return fprintf(stderr, "proxy-listen: cannot start the proxy (%d)\n", r), 1;

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4096) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
		return fprintf(stderr, "proxy-listen: listen: %s\n", strerror(errno)), 1;
	if (port_file) {
		char buf[16];
		int n = snprintf(buf, sizeof(buf), "%u\n", (unsigned)ntohs(sa.sin_port));
		if (fs_write_atomic_at(AT_FDCWD, port_file, buf, (size_t)n, 0644) < 0)
			return fprintf(stderr, "proxy-listen: %s: cannot write\n", port_file), 1;
	}
	printf("%u\n", (unsigned)ntohs(sa.sin_port));
	(void)fflush(stdout);

	/* A thread per connection, with a small stack: a thousand idle tunnels are a thousand
	 * threads mostly asleep in poll(). */
	(void)pthread_attr_init(&attr);
	(void)pthread_attr_setstacksize(&attr, THREAD_STACK);
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (;;) {
		pthread_t t;
		struct job *j;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
				continue;
			break;
		}
		j = malloc(sizeof(*j));
		if (!j) {
			(void)close(fd);
			continue;
		}
		*j = (struct job){.p = p, .fd = fd};
		if (pthread_create(&t, &attr, serve_thread, j) != 0) {
			(void)close(fd);
			free(j);
		}
	}
	return 1;
}
