#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A small S3-like HTTPS server that verifies AWS Signature Version 4 with one real key, and the
client helpers the sigv4 tests drive it with (tests/integration/sigv4.sh).

  s3server.py serve --cert C --key K --port-file F --log L --access-key-id ID
                    (secret in $S3SERVER_SECRET, optional session token in $S3SERVER_TOKEN)
      Listens on 127.0.0.1 only. Accepts only requests signed with that key: Authorization
      header (payload hash checked against the body, UNSIGNED-PAYLOAD, aws-chunked
      STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER] with every chunk and trailer signature
      checked, STREAMING-UNSIGNED-PAYLOAD-TRAILER) or presigned query. Anything else is 403
      (SignatureDoesNotMatch, InvalidAccessKeyId, InvalidToken, AccessDenied...), so a request
      still signed with a placeholder fails. Path-style buckets in memory: ListBuckets,
      CreateBucket, HeadBucket, ListObjects(V2), Put/Get/Head/DeleteObject (Range),
      CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload. Requests
      signed for another service (sts, execute-api: NON_S3_SERVICES) are verified with that
      service's rules (the path normalised and encoded a second time, the payload line the SHA-256
      of the body as received when x-amz-content-sha256 is absent) and answered with a JSON echo
      (service, path, body hash). One JSON line per request goes to the log.

  s3server.py sign|presign|stream  build a raw HTTP/1.1 request signed with the credentials in
      $AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY[/$AWS_SESSION_TOKEN]: sign and presign with
      botocore (S3SigV4Auth, S3SigV4QueryAuth; sign --service X: SigV4Auth for X), stream with this file's own aws-chunked signer
      (checked against AWS's published example first).
  s3server.py send  send a raw request to https://127.0.0.1:PORT and print the status line.

Only the standard library is needed to serve; the client helpers need botocore.
"""

import argparse
import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import socket
import ssl
import sys
import threading
import urllib.parse
import xml.etree.ElementTree as ET
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
STREAMING = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
UNSIGNED = "UNSIGNED-PAYLOAD"
MAX_BODY = 256 * 1024 * 1024
SKEW = datetime.timedelta(minutes=15)


# ---- SigV4, written from the specification ----
# S3 (service "s3") takes the path as sent, each byte in its canonical form and never encoded
# twice; every other service normalises the path (dot segments and empty segments removed) and
# encodes the path as sent once more, so an escape on the wire becomes %25XX.

NON_S3_SERVICES = ("sts", "execute-api")

def uri_encode(s, keep_slash):
    if isinstance(s, str):
        s = s.encode()
    safe = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~" + (
        b"/" if keep_slash else b"")
    return "".join(chr(c) if c in safe else "%%%02X" % c for c in s)


def pct_decode(s):
    if re.search(r"%(?![0-9A-Fa-f]{2})", s):
        raise AuthError(400, "InvalidArgument", "bad percent-encoding")
    return urllib.parse.unquote_to_bytes(s)


def remove_dot_segments(path):
    """RFC 3986 section 5.2.4 on the path as sent, empty segments dropped as well."""
    out = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    if not out:
        return "/"
    return "/" + "/".join(out) + ("/" if path.endswith("/") else "")


def canonical_path(raw_path, s3):
    if s3:
        return uri_encode(pct_decode(raw_path) or b"/", True)
    if re.search(r"%(?![0-9A-Fa-f]{2})", raw_path):
        raise AuthError(400, "InvalidArgument", "bad percent-encoding")
    return uri_encode(remove_dot_segments(raw_path).encode("latin-1"), True)


def canonical_query(raw_query, presigned):
    pairs = []
    for part in raw_query.split("&") if raw_query else []:
        if not part:
            continue
        k, _, v = part.partition("=")
        if presigned and pct_decode(k) == b"X-Amz-Signature":
            continue
        pairs.append((uri_encode(pct_decode(k), False), uri_encode(pct_decode(v), False)))
    pairs.sort()
    return "&".join("%s=%s" % p for p in pairs)


def header_value(v):
    return " ".join(v.split())


def signing_key(secret, date, region, service):
    k = ("AWS4" + secret).encode()
    for m in (date, region, service, "aws4_request"):
        k = hmac.new(k, m.encode(), hashlib.sha256).digest()
    return k


def hmac_hex(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


def canonical_request(method, raw_path, raw_query, headers, signed, payload, presigned, s3=True):
    lines = [method, canonical_path(raw_path, s3), canonical_query(raw_query, presigned)]
    for name in signed:
        values = headers.get_all(name) or []
        if not values:
            raise AuthError(403, "SignatureDoesNotMatch", "signed header %s missing" % name)
        lines.append("%s:%s" % (name, ",".join(header_value(v) for v in values)))
    lines.append("")
    lines.append(";".join(signed))
    lines.append(payload)
    return "\n".join(lines)


def string_to_sign(timestamp, scope, creq):
    return "AWS4-HMAC-SHA256\n%s\n%s\n%s" % (timestamp, scope,
                                            hashlib.sha256(creq.encode()).hexdigest())


def chunk_signature(key, timestamp, scope, prev, data):
    return hmac_hex(key, "AWS4-HMAC-SHA256-PAYLOAD\n%s\n%s\n%s\n%s\n%s" % (
        timestamp, scope, prev, EMPTY_SHA256, hashlib.sha256(data).hexdigest()))


def trailer_signature(key, timestamp, scope, prev, trailers):
    canon = "".join("%s:%s\n" % (n.lower(), v.strip()) for n, v in trailers)
    return hmac_hex(key, "AWS4-HMAC-SHA256-TRAILER\n%s\n%s\n%s\n%s" % (
        timestamp, scope, prev, hashlib.sha256(canon.encode()).hexdigest()))


class AuthError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


CRED_RE = re.compile(r"^([A-Za-z0-9]+)/(\d{8})/([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)/aws4_request$")


def parse_credential(v):
    m = CRED_RE.match(v)
    if not m:
        raise AuthError(400, "AuthorizationHeaderMalformed", "bad credential")
    return m.groups()


def parse_timestamp(ts):
    try:
        return datetime.datetime.strptime(ts, "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc)
    except ValueError:
        raise AuthError(403, "AccessDenied", "bad X-Amz-Date") from None


def decode_aws_chunked(body, mode, key, timestamp, scope, seed):
    """The object inside an aws-chunked body; every signature checked when mode is signed."""
    signed = mode in (STREAMING, STREAMING_TRAILER)
    trailer = mode in (STREAMING_TRAILER, STREAMING_UNSIGNED_TRAILER)
    pos, prev, out = 0, seed, []

    def line():
        nonlocal pos
        end = body.find(b"\r\n", pos)
        if end < 0 or end - pos > 4096:
            raise AuthError(400, "IncompleteBody", "bad aws-chunked line")
        s = body[pos:end].decode("latin-1")
        pos = end + 2
        return s

    while True:
        size_s, _, ext = line().partition(";")
        if not re.fullmatch(r"[0-9a-fA-F]{1,8}", size_s):
            raise AuthError(400, "IncompleteBody", "bad chunk size")
        size = int(size_s, 16)
        data = body[pos:pos + size]
        if len(data) != size:
            raise AuthError(400, "IncompleteBody", "short chunk")
        pos += size
        if signed:
            if not ext.startswith("chunk-signature="):
                raise AuthError(403, "SignatureDoesNotMatch", "chunk without signature")
            want = chunk_signature(key, timestamp, scope, prev, data)
            if not hmac.compare_digest(want, ext[len("chunk-signature="):]):
                raise AuthError(403, "SignatureDoesNotMatch", "chunk signature")
            prev = want
        elif ext:
            raise AuthError(400, "InvalidArgument", "chunk extension in unsigned aws-chunked")
        out.append(data)
        if size == 0:
            break
        if body[pos:pos + 2] != b"\r\n":
            raise AuthError(400, "IncompleteBody", "chunk not followed by CRLF")
        pos += 2
    if not trailer:
        if body[pos:] != b"\r\n":
            raise AuthError(400, "IncompleteBody", "bytes after the last chunk")
        return b"".join(out), {}
    trailers, seen_sig = [], False
    if body[pos:pos + 2] == b"\r\n":
        pos += 2
    while pos < len(body):
        s = line()
        if s == "":
            break
        name, colon, value = s.partition(":")
        if not colon:
            raise AuthError(400, "IncompleteBody", "bad trailer line")
        if name.lower() == "x-amz-trailer-signature":
            want = trailer_signature(key, timestamp, scope, prev, trailers)
            if not signed or not hmac.compare_digest(want, value.strip()):
                raise AuthError(403, "SignatureDoesNotMatch", "trailer signature")
            seen_sig = True
            if body[pos:] not in (b"", b"\r\n"):
                raise AuthError(400, "IncompleteBody", "bytes after the trailer")
            break
        trailers.append((name, value))
    if signed and not seen_sig:
        raise AuthError(403, "SignatureDoesNotMatch", "trailer signature missing")
    return b"".join(out), {n.lower(): v.strip() for n, v in trailers}


# ---- the server ----

class Store:
    def __init__(self):
        self.lock = threading.Lock()
        self.buckets = {}  # name -> {key: (bytes, etag, mtime)}
        self.uploads = {}  # upload id -> (bucket, key, {part: bytes})
        self.next_upload = 1


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "s3server"

    def log_message(self, fmt, *args):
        pass

    # -- plumbing --
    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(out)
                out.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise AuthError(400, "EntityTooLarge", "body too large")
        return self.rfile.read(n)

    def reply(self, status, body=b"", headers=None, head_only=False):
        self.send_response(status)
        hs = dict(headers or {})
        if body and "Content-Type" not in hs:
            hs["Content-Type"] = "application/xml"
        for k, v in hs.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(hs.pop("_length", len(body))))
        self.end_headers()
        if not head_only and self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s"
                "</Message></Error>" % (code, message)).encode()
        self.log_line(status, code)
        self.reply(status, body)

    def log_line(self, status, code=None):
        entry = {"method": self.command, "path": self.path.split("?")[0], "status": status,
                 "auth": getattr(self, "auth_kind", None),
                 "payload": getattr(self, "payload_kind", None), "code": code,
                 "service": getattr(self, "service", None)}
        with self.server.log_lock, open(self.server.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    # -- authentication --
    def authenticate(self, body):
        """Verifies the signature; returns the object bytes the body carries."""
        cfg = self.server.cfg
        raw_path, _, raw_query = self.path.partition("?")
        query = urllib.parse.parse_qs(raw_query, keep_blank_values=True)
        authz = self.headers.get_all("Authorization") or []
        presigned = "X-Amz-Algorithm" in query
        if len(authz) > 1 or (authz and presigned):
            raise AuthError(400, "InvalidArgument", "more than one signature")
        if presigned:
            self.auth_kind = "query"
            if query["X-Amz-Algorithm"] != ["AWS4-HMAC-SHA256"]:
                raise AuthError(400, "InvalidArgument", "unsupported algorithm")
            try:
                cred = query["X-Amz-Credential"][0]
                timestamp = query["X-Amz-Date"][0]
                expires = int(query["X-Amz-Expires"][0])
                signed = query["X-Amz-SignedHeaders"][0].split(";")
                signature = query["X-Amz-Signature"][0]
            except (KeyError, ValueError):
                raise AuthError(400, "AuthorizationQueryParametersError", "missing") from None
            token = (query.get("X-Amz-Security-Token") or [None])[0]
            when = parse_timestamp(timestamp)
            now = datetime.datetime.now(datetime.timezone.utc)
            if not 1 <= expires <= 604800 or now > when + datetime.timedelta(seconds=expires):
                raise AuthError(403, "AccessDenied", "Request has expired")
            if when - now > SKEW:
                raise AuthError(403, "AccessDenied", "Request is not yet valid")
            payload = self.headers.get("x-amz-content-sha256") or UNSIGNED
        else:
            if not authz:
                self.auth_kind = "none"
                raise AuthError(403, "AccessDenied", "Anonymous access is not allowed")
            self.auth_kind = "header"
            m = re.fullmatch(r"AWS4-HMAC-SHA256 (.*)", authz[0])
            if not m:
                raise AuthError(400, "InvalidArgument", "unsupported authorization scheme")
            parts = {}
            for p in m.group(1).split(","):
                k, _, v = p.strip().partition("=")
                if k in parts:
                    raise AuthError(400, "AuthorizationHeaderMalformed", "repeated " + k)
                parts[k] = v
            if set(parts) != {"Credential", "SignedHeaders", "Signature"}:
                raise AuthError(400, "AuthorizationHeaderMalformed", "bad authorization")
            cred, signature = parts["Credential"], parts["Signature"]
            signed = parts["SignedHeaders"].split(";")
            timestamp = self.headers.get("x-amz-date") or ""
            when = parse_timestamp(timestamp)
            if abs(datetime.datetime.now(datetime.timezone.utc) - when) > SKEW:
                raise AuthError(403, "RequestTimeTooSkewed", "time too skewed")
            token = self.headers.get("x-amz-security-token")
            payload = self.headers.get("x-amz-content-sha256")
        key_id, date, region, service = parse_credential(cred)
        self.service = service
        if not payload:
            if service == "s3":
                raise AuthError(400, "InvalidRequest", "missing x-amz-content-sha256")
            # Other services sign the hash of the body; this is the body as received.
            payload = hashlib.sha256(body).hexdigest()
        if "host" not in signed or signed != sorted(set(signed)):
            raise AuthError(403, "SignatureDoesNotMatch", "bad signed headers")
        if timestamp[:8] != date or region != cfg.region or (
                service != "s3" and (service not in NON_S3_SERVICES or presigned)):
            raise AuthError(403, "SignatureDoesNotMatch", "bad credential scope")
        if not hmac.compare_digest(key_id, cfg.key_id):
            raise AuthError(403, "InvalidAccessKeyId",
                            "The AWS Access Key Id you provided does not exist in our records.")
        if (token or "") != (cfg.token or "") or (cfg.token and not
                                                  hmac.compare_digest(token, cfg.token)):
            raise AuthError(403, "InvalidToken", "The provided token is malformed or otherwise "
                                                 "invalid.")
        if cfg.token and not presigned and "x-amz-security-token" not in signed:
            raise AuthError(403, "SignatureDoesNotMatch", "session token not signed")
        scope = "%s/%s/%s/aws4_request" % (date, region, service)
        creq = canonical_request(self.command, raw_path, raw_query, self.headers, signed, payload,
                                 presigned, service == "s3")
        key = signing_key(cfg.secret, date, region, service)
        want = hmac_hex(key, string_to_sign(timestamp, scope, creq))
        if not hmac.compare_digest(want, signature):
            raise AuthError(403, "SignatureDoesNotMatch", "The request signature we calculated "
                                                          "does not match the signature you "
                                                          "provided.")
        # The payload.
        self.payload_kind = payload if not re.fullmatch(r"[0-9a-f]{64}", payload) else "sha256"
        if self.payload_kind == "sha256":
            if hashlib.sha256(body).hexdigest() != payload:
                raise AuthError(400, "XAmzContentSHA256Mismatch", "payload hash mismatch")
            return body
        if payload == UNSIGNED:
            return body
        if payload in (STREAMING, STREAMING_TRAILER, STREAMING_UNSIGNED_TRAILER) and not presigned \
                and service == "s3":
            data, trailers = decode_aws_chunked(body, payload, key, timestamp, scope, want)
            declared = self.headers.get("x-amz-decoded-content-length")
            if declared is None or int(declared) != len(data):
                raise AuthError(400, "IncompleteBody", "x-amz-decoded-content-length")
            crc = trailers.get("x-amz-checksum-crc32")
            if crc is not None and base64.b64decode(crc) != zlib.crc32(data).to_bytes(4, "big"):
                raise AuthError(400, "BadDigest", "CRC32 mismatch")
            return data
        raise AuthError(400, "InvalidArgument", "unsupported payload %s" % payload)

    # -- operations --
    def handle_any(self):
        self.auth_kind = self.payload_kind = self.service = None
        try:
            body = self.read_body()
            data = self.authenticate(body)
            if self.service != "s3":
                status, out, headers = self.echo(data)
            else:
                status, out, headers = self.operate(data)
        except AuthError as e:
            self.error(e.status, e.code, e.message)
            return
        self.log_line(status)
        self.reply(status, out, headers)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

    def echo(self, data):
        """A non-S3 service: what was verified, for the tests to compare."""
        out = json.dumps({"service": self.service, "method": self.command, "path": self.path,
                          "sha256": hashlib.sha256(data).hexdigest(), "length": len(data)})
        return 200, out.encode(), {"Content-Type": "application/json"}

    def operate(self, data):
        st = self.server.store
        raw_path, _, raw_query = self.path.partition("?")
        q = urllib.parse.parse_qs(raw_query, keep_blank_values=True)
        path = urllib.parse.unquote(raw_path)
        bucket, _, key = path.lstrip("/").partition("/")
        m = self.command
        with st.lock:
            if not bucket:
                if m != "GET":
                    raise AuthError(405, "MethodNotAllowed", "method not allowed")
                items = "".join("<Bucket><Name>%s</Name><CreationDate>2024-01-01T00:00:00.000Z"
                                "</CreationDate></Bucket>" % b for b in sorted(st.buckets))
                return 200, ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListAllMyBucketsResult"
                             "><Owner><ID>slate</ID><DisplayName>slate</DisplayName></Owner>"
                             "<Buckets>%s</Buckets></ListAllMyBucketsResult>" % items).encode(), {}
            if not key:
                return self.bucket_op(st, bucket, q)
            objects = st.buckets.get(bucket)
            if objects is None:
                raise AuthError(404, "NoSuchBucket", "The specified bucket does not exist")
            if m == "POST" and "uploads" in q:
                uid = "upload%d" % st.next_upload
                st.next_upload += 1
                st.uploads[uid] = (bucket, key, {})
                return 200, ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                             "<InitiateMultipartUploadResult><Bucket>%s</Bucket><Key>%s</Key>"
                             "<UploadId>%s</UploadId></InitiateMultipartUploadResult>" % (
                                 bucket, key, uid)).encode(), {}
            if "uploadId" in q:
                uid = q["uploadId"][0]
                if uid not in st.uploads:
                    raise AuthError(404, "NoSuchUpload", "no such upload")
                parts = st.uploads[uid][2]
                if m == "PUT":
                    n = int(q["partNumber"][0])
                    parts[n] = data
                    return 200, b"", {"ETag": '"%s"' % hashlib.md5(data).hexdigest()}
                if m == "DELETE":
                    del st.uploads[uid]
                    return 204, b"", {}
                if m == "POST":
                    root = ET.fromstring(data)
                    nums = [int(e.text) for e in root.iter() if e.tag.endswith("PartNumber")]
                    if not nums or nums != sorted(nums) or any(n not in parts for n in nums):
                        raise AuthError(400, "InvalidPart", "bad part list")
                    obj = b"".join(parts[n] for n in nums)
                    etag = '"%s-%d"' % (hashlib.md5(b"".join(
                        hashlib.md5(parts[n]).digest() for n in nums)).hexdigest(), len(nums))
                    objects[key] = (obj, etag)
                    del st.uploads[uid]
                    return 200, ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                                 "<CompleteMultipartUploadResult><Bucket>%s</Bucket><Key>%s"
                                 "</Key><ETag>%s</ETag></CompleteMultipartUploadResult>" % (
                                     bucket, key, etag.replace('"', "&quot;"))).encode(), {}
            if m == "PUT":
                md5 = self.headers.get("Content-MD5")
                if md5 and base64.b64decode(md5) != hashlib.md5(data).digest():
                    raise AuthError(400, "BadDigest", "Content-MD5 mismatch")
                etag = '"%s"' % hashlib.md5(data).hexdigest()
                objects[key] = (data, etag)
                return 200, b"", {"ETag": etag}
            if m in ("GET", "HEAD"):
                if key not in objects:
                    raise AuthError(404, "NoSuchKey", "The specified key does not exist.")
                obj, etag = objects[key]
                headers = {"ETag": etag, "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT",
                           "Content-Type": "binary/octet-stream", "Accept-Ranges": "bytes"}
                rng = self.headers.get("Range")
                if rng:
                    a, _, b = rng.removeprefix("bytes=").partition("-")
                    start, end = int(a), min(int(b) if b else len(obj) - 1, len(obj) - 1)
                    headers["Content-Range"] = "bytes %d-%d/%d" % (start, end, len(obj))
                    obj = obj[start:end + 1]
                    if m == "HEAD":
                        headers["_length"] = len(obj)
                    return 206, obj, headers
                if m == "HEAD":
                    headers["_length"] = len(obj)
                return 200, obj, headers
            if m == "DELETE":
                objects.pop(key, None)
                return 204, b"", {}
        raise AuthError(405, "MethodNotAllowed", "method not allowed")

    def bucket_op(self, st, bucket, q):
        m = self.command
        if m == "PUT":
            st.buckets.setdefault(bucket, {})
            return 200, b"", {"Location": "/" + bucket}
        objects = st.buckets.get(bucket)
        if objects is None:
            raise AuthError(404, "NoSuchBucket", "The specified bucket does not exist")
        if m == "HEAD":
            return 200, b"", {}
        if m == "DELETE":
            if objects:
                raise AuthError(409, "BucketNotEmpty", "not empty")
            del st.buckets[bucket]
            return 204, b"", {}
        if m != "GET":
            raise AuthError(405, "MethodNotAllowed", "method not allowed")
        if "location" in q:
            return 200, b"<LocationConstraint/>", {}
        prefix = (q.get("prefix") or [""])[0]
        delim = (q.get("delimiter") or [""])[0]
        enc = (q.get("encoding-type") or [""])[0] == "url"
        v2 = (q.get("list-type") or [""])[0] == "2"
        esc = (lambda s: urllib.parse.quote(s, safe="/")) if enc else (
            lambda s: s.replace("&", "&amp;").replace("<", "&lt;"))
        keys, prefixes = [], set()
        for k in sorted(objects):
            if not k.startswith(prefix):
                continue
            rest = k[len(prefix):]
            if delim and delim in rest:
                prefixes.add(prefix + rest.split(delim)[0] + delim)
            else:
                keys.append(k)
        contents = "".join(
            "<Contents><Key>%s</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
            "<ETag>%s</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>" % (
                esc(k), objects[k][1].replace('"', "&quot;"), len(objects[k][0])) for k in keys)
        common = "".join("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % esc(p)
                         for p in sorted(prefixes))
        extra = "<KeyCount>%d</KeyCount>" % (len(keys) + len(prefixes)) if v2 else ""
        if enc:
            extra += "<EncodingType>url</EncodingType>"
        return 200, ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\""
                     "http://s3.amazonaws.com/doc/2006-03-01/\"><Name>%s</Name><Prefix>%s"
                     "</Prefix>%s<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>%s%s"
                     "</ListBucketResult>" % (bucket, esc(prefix), extra, contents,
                                              common)).encode(), {}


class Config:
    pass


def serve(args):
    cfg = Config()
    cfg.key_id = args.access_key_id
    cfg.secret = os.environ["S3SERVER_SECRET"]
    cfg.token = os.environ.get("S3SERVER_TOKEN") or None
    cfg.region = args.region
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    httpd.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    httpd.cfg, httpd.store = cfg, Store()
    httpd.log_path, httpd.log_lock = args.log, threading.Lock()
    with open(args.port_file + ".tmp", "w") as f:
        f.write("%d\n" % httpd.server_address[1])
    os.rename(args.port_file + ".tmp", args.port_file)
    httpd.serve_forever()


# ---- client helpers ----

def creds():
    return (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
            os.environ.get("AWS_SESSION_TOKEN") or None)


def raw_request(method, url, headers, body):
    u = urllib.parse.urlsplit(url)
    target = u.path + ("?" + u.query if u.query else "")
    hs = [(k, v) for k, v in headers.items()]
    if not any(k.lower() == "host" for k, _ in hs):
        hs.insert(0, ("Host", u.netloc))
    if body or method in ("PUT", "POST"):
        hs = [(k, v) for k, v in hs if k.lower() != "content-length"]
        hs.append(("Content-Length", str(len(body))))
    head = "%s %s HTTP/1.1\r\n" % (method, target) + "".join(
        "%s: %s\r\n" % (k, v.decode() if isinstance(v, bytes) else v) for k, v in hs)
    return head.encode() + b"Connection: close\r\n\r\n" + body


def read_body_arg(args):
    if args.body_file:
        with open(args.body_file, "rb") as f:
            return f.read()
    return (args.body or "").encode()


def sign(args):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config as BotoConfig
    from botocore.credentials import Credentials
    body = read_body_arg(args)
    url = "https://%s%s" % (args.host, args.target)
    req = AWSRequest(method=args.method, url=url, data=body,
                     headers=dict(h.split(":", 1) for h in args.header))
    req.context["client_config"] = BotoConfig(
        s3={"payload_signing_enabled": not args.unsigned_payload})
    if args.unsigned_payload:
        req.headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
    if args.service == "s3":
        S3SigV4Auth(Credentials(*creds()), "s3", args.region).add_auth(req)
    else:
        from botocore.auth import SigV4Auth
        SigV4Auth(Credentials(*creds()), args.service, args.region).add_auth(req)
    p = req.prepare()
    sys.stdout.buffer.write(raw_request(args.method, p.url, dict(p.headers), body))


def presign(args):
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    req = AWSRequest(method=args.method, url="https://%s%s" % (args.host, args.target))
    S3SigV4QueryAuth(Credentials(*creds()), "s3", args.region, expires=args.expires).add_auth(req)
    if args.url:
        print(req.url)
        return
    sys.stdout.buffer.write(raw_request(args.method, req.url, {}, b""))


def stream_body(key, timestamp, scope, seed, data, chunk, trailer):
    """aws-chunked: chunks of `chunk` bytes, each signed, then the empty one and the trailer."""
    out, prev = [], seed
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]
    for i, piece in enumerate(pieces):
        prev = chunk_signature(key, timestamp, scope, prev, piece)
        out.append(b"%x;chunk-signature=%s\r\n" % (len(piece), prev.encode()))
        out.append(piece)
        if piece or not trailer:
            out.append(b"\r\n")
    if trailer:
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        t = [("x-amz-checksum-crc32", crc)]
        sig = trailer_signature(key, timestamp, scope, prev, t)
        out.append(("x-amz-checksum-crc32:%s\r\nx-amz-trailer-signature:%s\r\n\r\n" % (
            crc, sig)).encode())
    return b"".join(out)


def self_check_stream():
    """This signer against AWS's published chunked-upload example (sigv4-streaming)."""
    key = signing_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3")
    body = stream_body(key, "20130524T000000Z", "20130524/us-east-1/s3/aws4_request",
                       "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
                       b"a" * 66560, 65536, False)
    for s in (b"ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
              b"0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
              b"b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"):
        assert s in body, "aws-chunked signer disagrees with AWS's example"
    assert len(body) == 66824


def stream(args):
    self_check_stream()
    key_id, secret, token = creds()
    data = read_body_arg(args)
    now = datetime.datetime.now(datetime.timezone.utc)
    timestamp, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = "%s/%s/s3/aws4_request" % (date, args.region)
    payload = STREAMING_TRAILER if args.trailer else STREAMING
    # The body's length does not depend on the signatures' values: size it with a dummy seed.
    length = len(stream_body(b"k", timestamp, scope, "0" * 64, data, args.chunk, args.trailer))
    headers = {"host": args.host, "x-amz-date": timestamp, "x-amz-content-sha256": payload,
               "content-encoding": "aws-chunked", "content-length": str(length),
               "x-amz-decoded-content-length": str(len(data))}
    if args.trailer:
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
    if token:
        headers["x-amz-security-token"] = token

    class H(dict):
        def get_all(self, name):
            return [self[name]] if name in self else []
    signed = sorted(headers)
    path, _, query = args.target.partition("?")
    creq = canonical_request("PUT", path, query, H(headers), signed, payload, False)
    k = signing_key(secret, date, args.region, "s3")
    seed = hmac_hex(k, string_to_sign(timestamp, scope, creq))
    headers["authorization"] = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, "
                                "Signature=%s" % (key_id, scope, ";".join(signed), seed))
    body = stream_body(k, timestamp, scope, seed, data, args.chunk, args.trailer)
    assert len(body) == length
    sys.stdout.buffer.write(raw_request("PUT", "https://%s%s" % (args.host, args.target),
                                        headers, body))


def send(args):
    with open(args.request, "rb") if args.request != "-" else sys.stdin.buffer as f:
        raw = f.read()
    ctx = ssl.create_default_context(cafile=args.ca)
    with socket.create_connection(("127.0.0.1", args.port)) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            t.sendall(raw)
            resp = b""
            while True:
                b = t.recv(65536)
                if not b:
                    break
                resp += b
    head, _, body = resp.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0].decode()
    print(status)
    if args.body_out:
        with open(args.body_out, "wb") as f:
            f.write(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--access-key-id", required=True)
    p.add_argument("--region", default="us-east-1")
    for name in ("sign", "presign", "stream"):
        p = sub.add_parser(name)
        p.add_argument("--host", required=True)
        p.add_argument("--region", default="us-east-1")
        p.add_argument("--service", default="s3", help="sign only: botocore's SigV4Auth for "
                       "any other service (no x-amz-content-sha256: the body's hash is signed)")
        p.add_argument("--method", default="PUT" if name == "stream" else "GET")
        p.add_argument("--header", action="append", default=[])
        p.add_argument("--body")
        p.add_argument("--body-file")
        p.add_argument("--unsigned-payload", action="store_true")
        p.add_argument("--expires", type=int, default=300)
        p.add_argument("--url", action="store_true")
        p.add_argument("--chunk", type=int, default=65536)
        p.add_argument("--trailer", action="store_true")
        p.add_argument("target")
    p = sub.add_parser("send")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--body-out")
    p.add_argument("request")
    args = ap.parse_args()
    {"serve": serve, "sign": sign, "presign": presign, "stream": stream, "send": send}[args.cmd](
        args)


if __name__ == "__main__":
    main()
