# For people who build with Docker. Without a container engine, `make image`
# builds the same image as a tarball.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /manager ./cmd/etcd-operator
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /etcd-tools ./cmd/etcd-tools

FROM gcr.io/distroless/static:nonroot
COPY --from=build /manager /manager
COPY --from=build /etcd-tools /etcd-tools
USER 65532:65532
ENTRYPOINT ["/manager"]
