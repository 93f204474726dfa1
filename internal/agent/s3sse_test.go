package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// sseAdmin is a client of the TLS MinIO with its root credentials, to look
// at what the agent stored as the store keeps it.
func sseAdmin(t *testing.T, loc Location, ca *testCA) *minio.Client {
	t.Helper()
	tr, err := s3Transport(S3Config{Endpoint: loc.S3.Endpoint, CABundle: string(ca.pem)}, true)
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := parseEndpoint(loc.S3.Endpoint)
	c, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(loc.S3.AccessKey, loc.S3.SecretKey, ""), Secure: true, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The store keeps each snapshot encrypted as asked (SSE-S3, SSE-KMS with
// the named key, SSE-C with the customer's key) and with the storage class
// asked; the restore and the verification read it back, an SSE-C one only
// with its key. What the store refuses (a KMS key it does not have, the
// wrong customer key, none) fails at once with S3EncryptionRefused, and a
// customer key that is not 32 bytes in base64 never reaches the store.
func TestS3ServerSideEncryption(t *testing.T) {
	e := startEtcd(t)
	want := fill(t, e.client(t), 50, 10)
	ca := newCA(t)
	base := startTLSMinIO(t, ca)
	base.S3.CABundle = string(ca.pem)
	admin := sseAdmin(t, base, ca)
	ctx := context.Background()
	customerKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{42}, 32))
	otherKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{43}, 32))

	for _, tc := range []struct {
		name, sseType, kmsKey, customer, class string
		header, value                          string // what the store says of the object
	}{
		{name: "s3", sseType: "S3", header: "X-Amz-Server-Side-Encryption", value: "AES256"},
		{name: "kms", sseType: "KMS", kmsKey: testKMSKey, header: "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", value: "arn:aws:kms:" + testKMSKey},
		{name: "customer", sseType: "Customer", customer: customerKey, header: "X-Amz-Server-Side-Encryption-Customer-Algorithm", value: "AES256"},
		{name: "class", class: "REDUCED_REDUNDANCY", header: "X-Amz-Storage-Class", value: "REDUCED_REDUNDANCY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc := base
			loc.S3.Key = "sse-" + tc.name
			loc.S3.SSEType, loc.S3.SSEKMSKeyID, loc.S3.SSECustomerKey, loc.S3.StorageClass = tc.sseType, tc.kmsKey, tc.customer, tc.class
			taken := succeeds(t)(Snapshot(ctx, snapshotConfig(e, loc, "snap", "uid-"+tc.name), quiet))
			object := loc.S3.Key + "/snap.db"
			checkStored(t, admin, loc, object, tc.header, tc.value)
			from := loc
			from.S3.Key = object
			restoreAndCompare(t, from, want)
			res := succeeds(t)(VerifySnapshot(ctx, verifyConfig(t, from, taken), quiet))
			if res.Checksum != taken.Checksum {
				t.Errorf("verified %s, stored %s", res.Checksum, taken.Checksum)
			}
			if tc.customer != "" {
				readsNeedTheCustomerKey(t, from, otherKey)
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		loc := base
		loc.S3.Key = "refused"
		loc.S3.SSEType, loc.S3.SSEKMSKeyID = "KMS", "no-such-key"
		res, code := Snapshot(ctx, snapshotConfig(e, loc, "snap", "uid-refused"), quiet)
		mustFail(t, res, code, conditions.ReasonS3EncryptionRefused, true)
		t.Logf("unknown KMS key: %s", res.Message)

		loc.S3.SSEType, loc.S3.SSEKMSKeyID, loc.S3.StorageClass = "", "", "NO_SUCH_CLASS"
		res, code = Snapshot(ctx, snapshotConfig(e, loc, "snap", "uid-class"), quiet)
		mustFail(t, res, code, conditions.ReasonInvalidDestination, true)
		t.Logf("unknown storage class: %s", res.Message)

		for _, key := range []string{"not base64!", base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!"))} {
			loc.S3.SSEType, loc.S3.SSECustomerKey, loc.S3.StorageClass = "Customer", key, ""
			res, code = Snapshot(ctx, snapshotConfig(e, loc, "snap", "uid-key"), quiet)
			mustFail(t, res, code, conditions.ReasonInvalidDestination, true)
		}
		plain := startMinIO(t)
		loc = plain.s3(plain.bucket(t), "plain")
		loc.S3.SSEType, loc.S3.SSECustomerKey = "Customer", customerKey
		res, code = Snapshot(ctx, snapshotConfig(e, loc, "snap", "uid-http"), quiet)
		mustFail(t, res, code, conditions.ReasonInvalidDestination, true)
	})
}

// checkStored looks at the object as the store keeps it: the header it
// reports (or its storage class) has the value asked for. An object
// written with a customer key is not even described without that key.
func checkStored(t *testing.T, admin *minio.Client, loc Location, object, header, value string) {
	t.Helper()
	ctx := context.Background()
	stat := minio.StatObjectOptions{}
	if loc.S3.SSECustomerKey != "" {
		stat.ServerSideEncryption, _ = serverSide(loc.S3)
		if _, err := admin.StatObject(ctx, loc.S3.Bucket, object, minio.StatObjectOptions{}); err == nil {
			t.Error("the store gave the SSE-C object's metadata out without the key")
		}
	}
	info, err := admin.StatObject(ctx, loc.S3.Bucket, object, stat)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Metadata.Get(header); got != value && (header != "X-Amz-Storage-Class" || info.StorageClass != value) {
		t.Errorf("the stored object's %s is %q (storage class %q), want %q", header, got, info.StorageClass, value)
	}
}

// readsNeedTheCustomerKey restores an object written with a customer key
// with another key, and with none. A store answers another key as it
// answers a caller without the right; the message says it may be the key.
func readsNeedTheCustomerKey(t *testing.T, from Location, otherKey string) {
	t.Helper()
	ctx := context.Background()
	bad := from
	bad.S3.SSECustomerKey = otherKey
	res, code := Restore(ctx, restoreConfig(t, bad, embeddedVersion), quiet)
	mustFail(t, res, code, conditions.ReasonS3AccessDenied, true)
	if !strings.Contains(res.Message, "customer key") {
		t.Errorf("a restore with another key says %q, not that the key may be wrong", res.Message)
	}
	bad.S3.SSEType, bad.S3.SSECustomerKey = "", ""
	res, code = Restore(ctx, restoreConfig(t, bad, embeddedVersion), quiet)
	mustFail(t, res, code, conditions.ReasonS3EncryptionRefused, true)
}
