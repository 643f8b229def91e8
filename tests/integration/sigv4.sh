# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# AWS SigV4 re-signing end to end on the host (doc/sigv4.md), no VM needed:
#  1. tests/integration/s3server.py (HTTPS on 127.0.0.1, test CA made here) verifies signatures
#     with the REAL key: the AWS CLI (botocore) with the real key can make a bucket, put (single
#     and multipart), list, get and presign; with a wrong secret, with the placeholder key, or
#     with the placeholder session token it is refused.
#  2. Requests signed by botocore (and by s3server.py's own aws-chunked signer) with the
#     PLACEHOLDER credentials are refused by the server as they are, and accepted once
#     tests/integration/sigv4-resign (proxy/sigv4, driven as the egress proxy drives it) has
#     re-signed them: header-signed put/get/list, UNSIGNED-PAYLOAD, presigned get, streaming
#     aws-chunked puts with and without a trailer, multipart upload. So the test fails if
#     re-signing is skipped or wrong.
#  3. What cannot be re-signed (SigV4a, a request edited after signing) is refused.

need_aws_cli
command -v openssl >/dev/null || skip "openssl not found"
command -v curl >/dev/null || skip "curl not found"
resign=$top_builddir/tests/integration/sigv4-resign
[ -x "$resign" ] || fail "$resign is missing (make check builds it)"
s3server=$top_srcdir/tests/integration/s3server.py
d=$test_tmpdir

# A test CA and a certificate for 127.0.0.1, made for this run only.
make_test_certs "$d" slate-sigv4-test-ca 127.0.0.1 IP:127.0.0.1

# Credentials made up for this run: the real ones only the server and the re-signer see, the
# placeholders shaped like slate's (secrets/placeholder.h).
rnd() { "$py" -c 'import secrets, sys; print("".join(secrets.choice(sys.argv[1]) for _ in range(int(sys.argv[2]))))' "$@"; }
upper=ABCDEFGHIJKLMNOPQRSTUVWXYZ234567
alnum=ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789
REAL_ID=AKIA$(rnd $upper 16)
REAL_SECRET=$(rnd "$alnum/+" 40)
REAL_TOKEN=IQoJb3JpZ2luX2VjE$(rnd "$alnum/+" 60)==
PH_ID=AKIASLATE$(rnd $upper 11)
PH_SECRET=slate$(rnd $alnum 35)
PH_TOKEN=slate$(rnd $alnum $((${#REAL_TOKEN} - 5)))

S3SERVER_SECRET=$REAL_SECRET S3SERVER_TOKEN=$REAL_TOKEN "$py" "$s3server" serve \
    --cert "$d/srv.pem" --key "$d/srv.key" --port-file "$d/port" --log "$d/server.log" \
    --access-key-id "$REAL_ID" >"$d/server.out" 2>&1 &
server_pid=$!
on_exit stop_bg server_pid
wait_file "$d/port" "$server_pid" "$d/server.out"
port=$(cat "$d/port")
log "s3server.py on https://127.0.0.1:$port"

printf '[default]\ns3 =\n  multipart_threshold = 5MB\n  multipart_chunksize = 5MB\n' >"$d/aws-config"
# aws_as ID SECRET TOKEN ARGS...: the AWS CLI against the test server, nothing else configured.
aws_as() {
    local id=$1 secret=$2 token=$3
    shift 3
    env -i PATH="$PATH" HOME="$d" LANG=C.UTF-8 AWS_CONFIG_FILE="$d/aws-config" \
        AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_DEFAULT_REGION=us-east-1 \
        AWS_EC2_METADATA_DISABLED=true AWS_ACCESS_KEY_ID="$id" AWS_SECRET_ACCESS_KEY="$secret" \
        AWS_SESSION_TOKEN="$token" \
        "$aws" --endpoint-url "https://127.0.0.1:$port" --ca-bundle "$d/ca.pem" --no-cli-pager "$@"
}
aws_real() { aws_as "$REAL_ID" "$REAL_SECRET" "$REAL_TOKEN" "$@"; }

# ---- 1. the server's verifier against botocore ----
echo "hello from slate" >"$d/small.txt"
head -c $((11 * 1024 * 1024 + 123)) /dev/urandom >"$d/big.bin"
aws_real s3 mb s3://bkt >/dev/null || fail "aws s3 mb with the real key failed"
aws_real s3 cp --only-show-errors "$d/small.txt" s3://bkt/dir/small.txt || fail "aws s3 cp (put) failed"
aws_real s3 cp --only-show-errors "$d/big.bin" s3://bkt/big.bin || fail "aws s3 cp (multipart) failed"
grep -q '"method": "POST", "path": "/bkt/big.bin", "status": 200' "$d/server.log" ||
    fail "the 11 MiB upload was not multipart"
aws_real s3 ls s3://bkt >"$d/ls.out" || fail "aws s3 ls failed"
if ! grep -q 'big.bin' "$d/ls.out" || ! grep -q 'PRE dir/' "$d/ls.out"; then
    fail "aws s3 ls: $(cat "$d/ls.out")"
fi
aws_real s3 cp --only-show-errors s3://bkt/big.bin "$d/big.out" || fail "aws s3 cp (get) failed"
cmp -s "$d/big.bin" "$d/big.out" || fail "the object came back different"
url=$(aws_real s3 presign s3://bkt/dir/small.txt --expires-in 300) || fail "aws s3 presign failed"
curl -sSf --cacert "$d/ca.pem" -o "$d/presigned.out" "$url" || fail "presigned GET failed"
cmp -s "$d/small.txt" "$d/presigned.out" || fail "presigned GET returned other bytes"
log "AWS CLI with the real key: mb, cp (single, multipart), ls, cp back, presign: ok"

expect_refused() { # WHAT CODE ID SECRET TOKEN
    local what=$1 code=$2
    shift 2
    if aws_as "$@" s3 ls s3://bkt >"$d/refused.out" 2>&1; then
        fail "$what: listing succeeded"
    fi
    grep -q "$code" "$d/refused.out" || fail "$what: $(cat "$d/refused.out")"
}
# The real secret with its last character changed (to x, or to y when it is an x already).
wrong_secret=${REAL_SECRET%?}x
[ "$wrong_secret" = "$REAL_SECRET" ] && wrong_secret=${REAL_SECRET%?}y
expect_refused "a wrong secret" SignatureDoesNotMatch "$REAL_ID" "$wrong_secret" "$REAL_TOKEN"
expect_refused "the placeholder key" InvalidAccessKeyId "$PH_ID" "$PH_SECRET" "$PH_TOKEN"
expect_refused "the placeholder token" InvalidToken "$REAL_ID" "$REAL_SECRET" "$PH_TOKEN"
if curl -sSf --cacert "$d/ca.pem" -o /dev/null "${url/X-Amz-Expires=300/X-Amz-Expires=301}" 2>/dev/null; then
    fail "an edited presigned URL was accepted"
fi
log "wrong secret, placeholder key, placeholder token, edited presigned URL: refused"

# ---- 2. placeholder-signed requests, re-signed by proxy/sigv4 ----
guest() { # s3server.py sign|presign|stream ... with the guest's placeholder credentials
    env AWS_ACCESS_KEY_ID="$PH_ID" AWS_SECRET_ACCESS_KEY="$PH_SECRET" AWS_SESSION_TOKEN="$PH_TOKEN" \
        "$py" "$s3server" "$@" --host "127.0.0.1:$port"
}
resign_run() {
    env SIGV4_PLACEHOLDER_ID="$PH_ID" SIGV4_PLACEHOLDER_SECRET="$PH_SECRET" \
        SIGV4_PLACEHOLDER_TOKEN="$PH_TOKEN" SIGV4_REAL_ID="$REAL_ID" \
        SIGV4_REAL_SECRET="$REAL_SECRET" SIGV4_REAL_TOKEN="$REAL_TOKEN" "$resign"
}
send() { "$py" "$s3server" send --port "$port" --ca "$d/ca.pem" "$@"; }
n=0
# through NAME STATUS REQUEST-FILE: refused as the guest signed it, STATUS once re-signed; the
# response body lands in $d/body.
through() {
    local name=$1 want=$2 raw=$3 st
    n=$((n + 1))
    st=$(send "$raw")
    case "$st" in
    *" 403 "*) ;;
    *) fail "$name: the server took the guest's own signature: $st" ;;
    esac
    resign_run <"$raw" >"$d/resigned.$n" 2>"$d/resign.err" ||
        fail "$name: sigv4-resign refused: $(cat "$d/resign.err")"
    grep -q "$PH_ID\|$PH_TOKEN" "$d/resigned.$n" && fail "$name: a placeholder is still in the request"
    st=$(send --body-out "$d/body" "$d/resigned.$n")
    case "$st" in
    *" $want "*) log "$name: $st ($(cat "$d/resign.err"))" ;;
    *) fail "$name: re-signed request answered $st: $(head -c 300 "$d/body")" ;;
    esac
}

head -c 300000 /dev/urandom >"$d/obj.bin"
guest sign --method PUT --body-file "$d/obj.bin" /bkt/guest/signed.bin >"$d/r.put"
through "put, payload hashed" 200 "$d/r.put"
guest sign --method PUT --unsigned-payload --body-file "$d/obj.bin" /bkt/guest/uns%20igned.bin \
    >"$d/r.put2"
through "put, UNSIGNED-PAYLOAD, a key with a space" 200 "$d/r.put2"
guest sign --header "Range:bytes=10-19" /bkt/guest/signed.bin >"$d/r.get"
through "get with Range" 206 "$d/r.get"
cmp -s "$d/body" <(head -c 20 "$d/obj.bin" | tail -c 10) || fail "ranged get returned other bytes"
guest sign "/bkt?list-type=2&prefix=guest%2F&encoding-type=url" >"$d/r.list"
through "ListObjectsV2" 200 "$d/r.list"
grep -q '<Key>guest/signed.bin</Key>' "$d/body" || fail "ListObjectsV2: $(cat "$d/body")"
guest presign /bkt/guest/signed.bin >"$d/r.presigned"
through "presigned get" 200 "$d/r.presigned"
cmp -s "$d/body" "$d/obj.bin" || fail "presigned get returned other bytes"

head -c 200000 /dev/urandom >"$d/stream.bin"
guest stream --body-file "$d/stream.bin" /bkt/guest/stream.bin >"$d/r.stream"
through "streaming put (STREAMING-AWS4-HMAC-SHA256-PAYLOAD)" 200 "$d/r.stream"
guest stream --trailer --chunk 8192 --body-file "$d/stream.bin" /bkt/guest/stream-trailer.bin \
    >"$d/r.stream2"
through "streaming put with a trailer (-TRAILER, x-amz-checksum-crc32)" 200 "$d/r.stream2"
for k in stream stream-trailer; do
    guest sign "/bkt/guest/$k.bin" >"$d/r.get-$k"
    through "get $k.bin" 200 "$d/r.get-$k"
    cmp -s "$d/body" "$d/stream.bin" || fail "$k.bin came back different"
done

# Multipart: create, two parts, complete.
guest sign --method POST "/bkt/guest/multi.bin?uploads" >"$d/r.mp-create"
through "CreateMultipartUpload" 200 "$d/r.mp-create"
upload_id=$(sed -n 's/.*<UploadId>\([^<]*\)<.*/\1/p' "$d/body")
[ -n "$upload_id" ] || fail "no UploadId in $(cat "$d/body")"
head -c 5242880 "$d/big.bin" >"$d/part1"
head -c 1000 "$d/obj.bin" >"$d/part2"
for i in 1 2; do
    guest sign --method PUT --body-file "$d/part$i" \
        "/bkt/guest/multi.bin?partNumber=$i&uploadId=$upload_id" >"$d/r.mp-part$i"
    through "UploadPart $i" 200 "$d/r.mp-part$i"
done
printf '<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part><Part><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>' >"$d/complete.xml"
guest sign --method POST --body-file "$d/complete.xml" "/bkt/guest/multi.bin?uploadId=$upload_id" \
    >"$d/r.mp-complete"
through "CompleteMultipartUpload" 200 "$d/r.mp-complete"
guest sign /bkt/guest/multi.bin >"$d/r.mp-get"
through "get the multipart object" 200 "$d/r.mp-get"
cmp -s "$d/body" <(cat "$d/part1" "$d/part2") || fail "the multipart object came back different"

# ---- 3. refusals ----
sed '0,/^Authorization: AWS4-HMAC-SHA256/s//Authorization: AWS4-ECDSA-P256-SHA256/' "$d/r.get" >"$d/r.sigv4a"
if resign_run <"$d/r.sigv4a" >/dev/null 2>"$d/resign.err"; then
    fail "a SigV4a request was re-signed"
fi
grep -q "cannot re-sign" "$d/resign.err" || fail "SigV4a: $(cat "$d/resign.err")"
sed '1s|/bkt/guest/signed.bin|/bkt/guest/other.bin|' "$d/r.get" >"$d/r.edited"
if resign_run <"$d/r.edited" >/dev/null 2>"$d/resign.err"; then
    fail "a request edited after signing was re-signed"
fi
grep -q "does not match the request as forwarded" "$d/resign.err" || fail "edited: $(cat "$d/resign.err")"
log "SigV4a and a request edited after signing: refused, not re-signed"
